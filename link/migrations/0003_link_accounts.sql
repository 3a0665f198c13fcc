-- Accounts: a pairing code records the account of the key that asked for
-- it, and the world it links belongs to that account. '' stands for the
-- operator's account, which owns every world linked before accounts.
ALTER TABLE link_pairing_codes ADD COLUMN account_id TEXT NOT NULL DEFAULT '';
ALTER TABLE link_worlds ADD COLUMN account_id TEXT NOT NULL DEFAULT '';
