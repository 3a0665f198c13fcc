-- API keys of the relay. Only the SHA-256 of a key is stored; the
-- plaintext is shown once when the key is created and never written here.
CREATE TABLE api_keys (
    seq            INTEGER PRIMARY KEY,          -- creation order
    id             TEXT    NOT NULL UNIQUE,      -- random public id (16 hex chars)
    key_hash       BLOB    NOT NULL UNIQUE,      -- SHA-256 of the full key, 32 bytes
    prefix         TEXT    NOT NULL,             -- first 8 characters after "rk_", for display
    name           TEXT    NOT NULL,
    scopes         TEXT    NOT NULL,             -- JSON array of scope names
    client_ids     TEXT    NOT NULL DEFAULT '[]',-- JSON array of bound client ids
    scoped_user_id TEXT    NOT NULL DEFAULT '',
    client_users   TEXT    NOT NULL DEFAULT '{}',-- JSON object client id -> user id
    expires_at     TEXT,                         -- RFC 3339 UTC, NULL = never
    enabled        INTEGER NOT NULL DEFAULT 1,
    created_at     TEXT    NOT NULL,             -- RFC 3339 UTC
    revoked_at     TEXT,                         -- RFC 3339 UTC, NULL = not revoked
    CHECK (length(key_hash) = 32),
    CHECK (enabled IN (0, 1))
);
