-- Accounts: every key belongs to one. The operator's account (id
-- 'operator') is made here and owns every key that existed before
-- accounts, so an upgraded relay keeps every key working as it did.
CREATE TABLE accounts (
    seq          INTEGER PRIMARY KEY,                 -- creation order
    id           TEXT    NOT NULL UNIQUE,             -- 'operator' or 'acc_' and 16 hex chars
    name         TEXT    NOT NULL UNIQUE COLLATE NOCASE,
    quotas       TEXT    NOT NULL DEFAULT '{}',       -- JSON object, see keys.Quotas
    created_at   TEXT    NOT NULL,                    -- RFC 3339 UTC
    suspended_at TEXT                                 -- RFC 3339 UTC, NULL = not suspended
);
INSERT INTO accounts (id, name, quotas, created_at)
    VALUES ('operator', 'operator', '{}', strftime('%Y-%m-%dT%H:%M:%SZ', 'now'));
ALTER TABLE api_keys ADD COLUMN account_id TEXT NOT NULL DEFAULT 'operator';
CREATE INDEX api_keys_account ON api_keys (account_id);
