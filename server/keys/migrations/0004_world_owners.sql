-- The owners of embedded worlds made by an account other than the
-- operator's. A world without a row belongs to the operator's account, as
-- every world made before accounts could make worlds does.
CREATE TABLE world_owners (
    client_id  TEXT NOT NULL PRIMARY KEY,
    account_id TEXT NOT NULL
);
CREATE INDEX world_owners_account ON world_owners (account_id);
