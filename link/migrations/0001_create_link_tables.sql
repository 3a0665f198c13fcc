-- Linked worlds: pairing codes, the worlds paired and their connection
-- tokens. Codes and tokens are stored only as SHA-256 hashes. Times are
-- Unix milliseconds, so that they compare as numbers.
CREATE TABLE link_pairing_codes (
    code_hash  BLOB    PRIMARY KEY,          -- SHA-256 of the normalised code
    client_id  TEXT    NOT NULL DEFAULT '',  -- world it pairs again; '' for any
    created_by TEXT    NOT NULL DEFAULT '',  -- id of the API key that asked for it
    created_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL,
    CHECK (length(code_hash) = 32)
);

CREATE TABLE link_worlds (
    client_id          TEXT    PRIMARY KEY,
    world_id           TEXT    NOT NULL DEFAULT '',
    world_title        TEXT    NOT NULL DEFAULT '',
    server_fingerprint TEXT    NOT NULL DEFAULT '',
    server_origin      TEXT    NOT NULL DEFAULT '',
    paired_at          INTEGER NOT NULL,
    unpaired_at        INTEGER                -- NULL while paired
);

CREATE TABLE link_tokens (
    token_hash BLOB    PRIMARY KEY,           -- SHA-256 of the token
    client_id  TEXT    NOT NULL REFERENCES link_worlds (client_id),
    created_at INTEGER NOT NULL,
    revoked_at INTEGER,                       -- NULL while valid
    CHECK (length(token_hash) = 32)
);

CREATE INDEX link_tokens_by_world ON link_tokens (client_id);
