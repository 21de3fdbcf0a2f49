-- 0007: each ledger entry records the lease fence its attempt started under (LedgerEntry.fence), so
-- a takeover knows whether a call left in doubt was started by the holder it took over from or by
-- an older one that may still be frozen mid-act (fencing.LeaseGuard.started_before_predecessor).
-- Existing rows keep NULL: their entries' JSON has no fence, so their checksums are unchanged.
ALTER TABLE unbroken_effects ADD COLUMN lease_fence bigint;
