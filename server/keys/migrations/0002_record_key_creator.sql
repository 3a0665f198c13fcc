-- Every key records what created it: the id of the key that created it
-- through the key service, or 'bootstrap' for the first admin key. Keys
-- stored before this column existed keep '' (not recorded).
ALTER TABLE api_keys ADD COLUMN created_by TEXT NOT NULL DEFAULT '';
