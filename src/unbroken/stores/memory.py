"""The reference store: everything in a dict, for tests. Same contract as the durable stores,
nothing survives the process."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from ..codec import EncodedSave, StoredRecord
from ..errors import ConcurrentSave, LeaseHeld, LeaseLost, RunNotFound
from ..state import TERMINAL_PHASES, Lease, LedgerEntry, RunSummary, check_run_id
from .base import Store


@dataclass
class _Run:
    records: list[StoredRecord] = field(default_factory=list)
    summary: RunSummary | None = None
    fence: int = 0
    owner: str | None = None
    expires_at: float = 0.0


class InMemoryStore(Store):
    """``memory://``: a store in this process's memory."""

    capabilities = frozenset({"leases", "ledger"})

    def __init__(self, url: str = "memory://") -> None:
        self.url = url
        self._lock = threading.RLock()
        self._runs: dict[str, _Run] = {}
        self._ledger: dict[str, LedgerEntry] = {}
        self.clock = time.time

    def _check_fence(self, run: _Run | None, run_id: str, fence: int | None) -> None:
        if fence is None:
            return
        current = run.fence if run else 0
        if current != fence:
            raise LeaseLost(f"run {run_id!r} is now owned under fence {current}, not {fence}; this write was refused")

    def append(self, save: EncodedSave, *, expect_seq: int, fence: int | None = None) -> None:
        check_run_id(save.run_id)
        with self._lock:
            run = self._runs.get(save.run_id)
            self._check_fence(run, save.run_id, fence)
            head = run.records[-1].seq if run and run.records else 0
            if head != expect_seq:
                raise ConcurrentSave(f"run {save.run_id!r} is at save {head}, not {expect_seq}; reload it")
            if run is None:
                run = self._runs[save.run_id] = _Run()
            run.records.append(StoredRecord(save.seq, save.body, save.checksum))
            run.summary = save.summary
            for entry in save.ledger:
                self._ledger[entry.key] = replace(entry)

    def read_records(self, run_id: str) -> list[StoredRecord]:
        check_run_id(run_id)
        with self._lock:
            run = self._runs.get(run_id)
            if run is None or not run.records:
                raise RunNotFound(f"no run {run_id!r} in {self.url}")
            return list(run.records)

    def rewrite(self, run_id: str, saves: Sequence[EncodedSave], *, expect_seq: int, fence: int | None = None) -> None:
        check_run_id(run_id)
        with self._lock:
            run = self._runs.get(run_id)
            self._check_fence(run, run_id, fence)
            head = run.records[-1].seq if run and run.records else 0
            if head != expect_seq:
                raise ConcurrentSave(f"run {run_id!r} is at save {head}, not {expect_seq}; reload it")
            if run is None:
                run = self._runs[run_id] = _Run()
            run.records = [StoredRecord(s.seq, s.body, s.checksum) for s in saves]
            run.summary = saves[-1].summary if saves else None

    def list_runs(self) -> list[RunSummary]:
        with self._lock:
            rows = [run.summary for run in self._runs.values() if run.summary is not None and run.records]
        return sorted(rows, key=lambda row: row.updated_at, reverse=True)

    def delete_run(self, run_id: str) -> None:
        check_run_id(run_id)
        with self._lock:
            self._runs.pop(run_id, None)
            for key in [k for k, e in self._ledger.items() if e.run_id == run_id]:
                del self._ledger[key]

    def ledger_claim(self, entry: LedgerEntry, *, fence: int | None = None) -> tuple[LedgerEntry, bool]:
        check_run_id(entry.run_id)
        with self._lock:
            self._check_fence(self._runs.get(entry.run_id), entry.run_id, fence)
            existing = self._ledger.get(entry.key)
            if existing is not None:
                return replace(existing), False
            self._ledger[entry.key] = replace(entry)
            return replace(entry), True

    def ledger_put(self, entry: LedgerEntry, *, fence: int | None = None) -> None:
        check_run_id(entry.run_id)
        with self._lock:
            self._check_fence(self._runs.get(entry.run_id), entry.run_id, fence)
            self._ledger[entry.key] = replace(entry)

    def ledger_get(self, run_id: str, key: str) -> LedgerEntry | None:
        check_run_id(run_id)
        with self._lock:
            entry = self._ledger.get(key)
            return replace(entry) if entry is not None and entry.run_id == run_id else None

    def ledger_list(self, run_id: str) -> list[LedgerEntry]:
        check_run_id(run_id)
        with self._lock:
            rows = [replace(e) for e in self._ledger.values() if e.run_id == run_id]
        return sorted(rows, key=lambda e: (e.created_at, e.key))

    def ledger_gc(self, older_than: float) -> int:
        with self._lock:
            doomed = []
            for key, entry in self._ledger.items():
                run = self._runs.get(entry.run_id)
                finished = run is None or (run.summary is not None and run.summary.phase in TERMINAL_PHASES)
                if finished and entry.updated_at < older_than:
                    doomed.append(key)
            for key in doomed:
                del self._ledger[key]
            return len(doomed)

    def acquire_lease(self, run_id: str, owner: str, ttl: float, *, takeover_from: str | None = None) -> Lease:
        check_run_id(run_id)
        with self._lock:
            now = self.clock()
            run = self._runs.setdefault(run_id, _Run())
            live = run.owner is not None and run.expires_at > now
            if live and run.owner not in (owner, takeover_from):
                raise LeaseHeld(f"run {run_id!r} is held by {run.owner} for {run.expires_at - now:.1f}s more")
            run.fence += 1
            run.owner = owner
            run.expires_at = now + ttl
            return Lease(run_id, owner, run.fence, run.expires_at)

    def renew_lease(self, lease: Lease, ttl: float) -> Lease:
        with self._lock:
            run = self._runs.get(lease.run_id)
            if run is None or run.fence != lease.fence or run.owner != lease.owner:
                raise LeaseLost(f"lease on run {lease.run_id!r} (fence {lease.fence}) was taken over")
            run.expires_at = self.clock() + ttl
            return replace(lease, expires_at=run.expires_at)

    def release_lease(self, lease: Lease) -> None:
        with self._lock:
            run = self._runs.get(lease.run_id)
            if run is not None and run.fence == lease.fence:
                run.owner = None
                run.expires_at = 0.0

    def lease_of(self, run_id: str) -> Lease | None:
        check_run_id(run_id)
        with self._lock:
            run = self._runs.get(run_id)
            if run is None or run.owner is None or run.expires_at <= self.clock():
                return None
            return Lease(run_id, run.owner, run.fence, run.expires_at)
