-- The audit log: one row per recorded action, oldest first by seq.
CREATE TABLE audit_records (
    seq        INTEGER PRIMARY KEY AUTOINCREMENT,
    at         INTEGER NOT NULL, -- Unix time in nanoseconds
    account    TEXT NOT NULL,
    key_id     TEXT NOT NULL,
    session    TEXT NOT NULL,
    address    TEXT NOT NULL,
    action     TEXT NOT NULL,
    target     TEXT NOT NULL,
    outcome    TEXT NOT NULL,
    detail     TEXT NOT NULL,
    request_id TEXT NOT NULL
);
CREATE INDEX audit_records_account ON audit_records (account, seq);
CREATE INDEX audit_records_at ON audit_records (at);
