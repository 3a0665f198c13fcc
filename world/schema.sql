-- Schema of a world database. Every statement is idempotent: it runs each
-- time a world is opened. PRAGMA user_version records the schema version.

-- meta holds the world's settings: title, system, clientId and permissions
-- (a JSON object mapping world permissions to roles).
CREATE TABLE IF NOT EXISTS meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
) STRICT, WITHOUT ROWID;

-- documents holds every top-level document as one row of JSON source data,
-- its embedded documents included.
CREATE TABLE IF NOT EXISTS documents (
    collection TEXT NOT NULL,
    id         TEXT NOT NULL,
    data       TEXT NOT NULL,
    PRIMARY KEY (collection, id)
) STRICT, WITHOUT ROWID;

-- journal holds records about committed changes, written in the same
-- transaction as the changes (Options.Journal): the event hub keeps each
-- event of its resume window here, by sequence number.
CREATE TABLE IF NOT EXISTS journal (
    seq  INTEGER PRIMARY KEY,
    data BLOB NOT NULL
) STRICT;
