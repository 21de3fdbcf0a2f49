-- 0003: each effect-ledger entry carries the checksum it was written with (NULL: written before),
-- checked on every read like a save record's.
ALTER TABLE unbroken_effects ADD COLUMN checksum text;
