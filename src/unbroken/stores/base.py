"""The Store: the small seam every backend implements.

A backend persists three things and nothing else:

* the run's save records (append one atomically, conditional on the run's head seq and fence;
  read them all back; replace them all atomically);
* the effect ledger, one entry per idempotency key (insert-if-absent, upsert, read);
* the run's lease (owner, fence token, expiry on the store's own clock).

Everything with rules in it (folding records into state, reconciliation, lease take-over,
policies) lives above the store, so a new backend is a few hundred lines.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass

from ..codec import MIGRATIONS, Decoded, EncodedSave, Migrations, PackedRecords, StoredRecord, decode
from ..state import Lease, LedgerEntry, RunState, RunSummary, SaveInfo

CAPABILITIES = frozenset({"leases", "ledger", "multi_process", "multi_host", "claim"})


@dataclass(frozen=True)
class ClaimedRun:
    """A submitted run a worker has just claimed: its task, the agent name it was submitted
    for, and the lease the claim took (owner, fence, expiry on the store's clock)."""

    run_id: str
    task: str
    agent: str | None
    lease: Lease


class Store(ABC):
    """A place where runs are saved. Safe to share between threads of one process.

    ``capabilities`` says what the backend supports beyond the core (for example
    ``multi_process``: several processes on one machine may use it at once); a feature the
    backend lacks raises ``Unsupported`` naming a store that has it."""

    url: str = ""
    capabilities: frozenset[str] = frozenset()

    # ------------------------------------------------------------------ records

    @abstractmethod
    def append(self, save: EncodedSave, *, expect_seq: int, fence: int | None = None) -> None:
        """Write one save record, its summary and its ledger entries as one atomic write,
        if and only if the run's head is ``expect_seq`` (0 for a new run) and, when ``fence``
        is given, the run's fence token is ``fence``. Durable when it returns (at the store's
        durability level). Raises ``LeaseLost`` or ``ConcurrentSave`` having written nothing."""

    @abstractmethod
    def read_records(self, run_id: str) -> list[StoredRecord]:
        """All save records of the run, in seq order. Raises ``RunNotFound``."""

    @abstractmethod
    def rewrite(self, run_id: str, saves: Sequence[EncodedSave], *, expect_seq: int, fence: int | None = None) -> None:
        """Atomically replace all records of the run (migration, recovery from corruption)."""

    @abstractmethod
    def list_runs(self) -> list[RunSummary]:
        """A summary of every stored run, most recently updated first."""

    @abstractmethod
    def delete_run(self, run_id: str) -> None:
        """Remove the run, its ledger and its lease. Safe to call twice."""

    # ------------------------------------------------------------------ ledger

    @abstractmethod
    def ledger_claim(self, entry: LedgerEntry, *, fence: int | None = None) -> tuple[LedgerEntry, bool]:
        """Insert ``entry`` unless its key exists. Returns (the stored entry, whether it was
        inserted now). Atomic across threads and processes: of two claims of one key, one wins."""

    @abstractmethod
    def ledger_put(self, entry: LedgerEntry, *, fence: int | None = None) -> None:
        """Insert or replace the entry for ``entry.key``."""

    @abstractmethod
    def ledger_get(self, run_id: str, key: str) -> LedgerEntry | None:
        """The entry for ``key`` in run ``run_id``, or None."""

    @abstractmethod
    def ledger_list(self, run_id: str) -> list[LedgerEntry]:
        """Every ledger entry of the run, oldest first."""

    @abstractmethod
    def ledger_gc(self, older_than: float) -> int:
        """Delete ledger entries last updated before ``older_than`` (a Unix time) that belong
        to finished runs; never those of a run that is still live. Returns how many."""

    # ------------------------------------------------------------------ leases

    @abstractmethod
    def acquire_lease(self, run_id: str, owner: str, ttl: float, *, takeover_from: str | None = None) -> Lease:
        """Take the run's lease for ``ttl`` seconds and bump its fence token. Succeeds if the
        run has no live lease (expiry judged on the store's clock), if ``owner`` already holds
        it, or if the holder is ``takeover_from`` (the caller proved it dead). Else ``LeaseHeld``."""

    @abstractmethod
    def renew_lease(self, lease: Lease, ttl: float) -> Lease:
        """Extend the lease; ``LeaseLost`` if its fence is no longer current."""

    @abstractmethod
    def release_lease(self, lease: Lease) -> None:
        """Give the lease up (no-op if it was already lost)."""

    @abstractmethod
    def lease_of(self, run_id: str) -> Lease | None:
        """The run's current lease holder, or None when nobody holds a live lease."""

    # ------------------------------------------------------------------ claiming (optional)

    def submit(self, task: str, run_id: str | None = None, *, agent: str | None = None) -> str:
        """Record a run for workers to pick up (a run with no save point yet) and return its
        run id (a new ``run-...`` id when none is given). ``agent`` names the agent meant to run
        it; workers started for another agent name leave it alone. Durable when it returns;
        safe to call twice with the same run id and task. Raises ``TaskMismatch`` if the run id
        holds another task, ``Unsupported`` on stores without the ``claim`` capability."""
        from ..errors import Unsupported

        raise Unsupported(
            f"{type(self).__name__} ({self.url}) cannot queue runs for workers; use sqlite:///FILE "
            "(several processes on one machine) or postgresql://... (many machines)"
        )

    def claim_runnable(self, owner: str, ttl: float, *, agent: str | None = None, limit: int = 1) -> list[ClaimedRun]:
        """Claim up to ``limit`` submitted runs (for ``agent``, or any when None) that are not
        finished or paused and whose lease is free or expired on the store's clock: each gets
        ``owner`` as lease holder for ``ttl`` seconds and a new fence token. Two concurrent
        callers never claim the same run. Raises ``Unsupported`` like ``submit``."""
        from ..errors import Unsupported

        raise Unsupported(
            f"{type(self).__name__} ({self.url}) cannot hand runs to workers; use sqlite:///FILE "
            "(several processes on one machine) or postgresql://... (many machines)"
        )

    def close(self) -> None:  # noqa: B027 - optional for backends without resources
        """Release connections and files. The store cannot be used afterwards."""

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ derived

    def read_raw_records(self, run_id: str) -> list[StoredRecord]:
        """``read_records`` for the loader: a backend may return bodies as UTF-8 bytes here to
        spare a decode on resume. Defaults to ``read_records``."""
        return self.read_records(run_id)

    def read_packed(self, run_id: str) -> PackedRecords | None:
        """All record bodies in one buffer for the loader's fastest path, or None when the
        backend has no such read (the loader then uses ``read_raw_records``)."""
        return None

    def decode(self, run_id: str, *, recover: bool = False, migrations: Migrations = MIGRATIONS) -> Decoded:
        """Read and fold the run's records (see ``codec.decode``)."""
        packed = self.read_packed(run_id)
        if packed is None:
            return decode(run_id, self.read_raw_records(run_id), recover=recover, migrations=migrations)
        return decode(
            run_id, packed, recover=recover, migrations=migrations, fallback=lambda: self.read_raw_records(run_id)
        )

    def load(self, run_id: str, *, recover: bool = False) -> RunState:
        """The run's state at its last save point. Raises ``RunNotFound``, ``CorruptCheckpoint``
        (with ``recover=False``) or ``IncompatibleSchema``; never returns a silently wrong state."""
        return self.decode(run_id, recover=recover).state

    def history(self, run_id: str) -> list[SaveInfo]:
        """The run's save points, oldest first."""
        return self.decode(run_id, recover=True).timeline

    def exists(self, run_id: str) -> bool:
        from ..errors import RunNotFound

        try:
            return bool(self.read_records(run_id))
        except RunNotFound:
            return False
