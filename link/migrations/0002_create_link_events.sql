-- The retained events of linked worlds, for resuming streams across
-- restarts: the last DefaultEventRetention of each world, with what the
-- read rules need (event, JSON written by package link).
CREATE TABLE link_events (
    client_id TEXT    NOT NULL,
    seq       INTEGER NOT NULL,
    event     BLOB    NOT NULL,
    PRIMARY KEY (client_id, seq)
) WITHOUT ROWID;
