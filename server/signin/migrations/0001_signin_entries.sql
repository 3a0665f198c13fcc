-- The sign-in state of a relay alone: passwords, console sessions and
-- invites, as entries of one table keyed like the cluster's bucket.
CREATE TABLE signin_entries (
    key      TEXT PRIMARY KEY,
    value    BLOB NOT NULL,
    revision INTEGER NOT NULL
);
