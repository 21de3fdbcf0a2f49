"""The primitive contract: what a backend implements, and nothing else.

A backend keeps, per run, a **head** (its last acknowledged save seq, and the lease: owner,
fence token, expiry), the run's **save records** (opaque text + checksum, by seq), a **summary**
for listings, and the run's **effect ledger** (one entry per idempotency key, with a checksum).
Every rule (leases, fencing, take-over, GC, run-id checks, damage detection, decoding, error
messages) lives once above this seam, in ``Store`` (``base.py``); a backend never re-states one.

Atomicity rules (the whole contract; ``unbroken.testing.StoreContract`` tests each):

A1. ``write_record`` is conditional and all-or-nothing: the record at ``save.seq`` is written and
    the head's seq moves to it only if the head's seq is ``expect_seq`` (0: no records yet) and,
    when ``fence`` is given, the head's fence is ``fence``. Otherwise it raises ``Refused`` having
    written nothing. Of two writers racing for one position exactly one succeeds. (A store with
    only create-only puts meets it by making "record N" create-only and checking the fence in the
    head it CAS'd or read: see docs/stores.md.)
A2. The ledger entries given with a record are durable no later than the record: a crash may
    leave the entries without the record (resume then reuses their outcomes), never the record
    without its entries. One transaction gives this for free; a file or object store writes the
    entries first.
A3. ``replace_records`` swaps the whole record list for the given one atomically (readers see the
    old list or the new one), under the same condition as A1.
A4. ``swap_head`` is a compare-and-set on the head: it writes ``new`` only if the stored head still
    equals ``expected`` (all fields; ``None``: the run has no head yet) and returns whether it did.
    It never moves ``seq`` (only records do) and the fence it writes never goes down.
A5. ``insert_entry`` is insert-if-absent, atomic across threads and processes: of two inserts of
    one key exactly one writes. ``insert_entry`` and ``put_entry`` with a ``fence`` write only
    while the head's fence is ``fence`` (else ``Refused``).
A6. ``store_time`` is the one clock leases are judged by (the database's, where there is one), so
    a worker with a wrong clock can neither extend nor steal a lease.
A7. Durable when a write returns, at the level ``durability`` declares.

Reads return what is stored, damaged or not: checking is the job above the seam. A backend
raises ``StoreUnavailable`` (from its driver error) when it cannot reach its storage.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from ..codec import EncodedSave, StoredRecord, checksum, dumps, loads
from ..state import LedgerEntry, RunSummary

Durability = Literal["memory", "process_crash", "power_loss"]
"""What a returned write survives: nothing past the process; a process crash; a power loss."""

CAPABILITIES = frozenset({"leases", "ledger", "multi_process", "multi_host", "claim"})
"""The capability names a backend may declare in ``capabilities``."""


class Refused(Exception):
    """A conditional primitive found the head's seq or fence not as expected and wrote nothing."""


@dataclass(frozen=True)
class RunHead:
    """The small per-run row every write is conditional on."""

    seq: int = 0
    """The last acknowledged save record (0: none yet). A record missing up to it is damage."""
    fence: int = 0
    """Bumped by every lease acquisition; writes carrying an older one are refused."""
    owner: str | None = None
    expires_at: float = 0.0
    """When the lease ends, on ``store_time``'s clock."""


@dataclass(frozen=True)
class Submission:
    """A run queued for workers by ``submit``: its task and the agent name it is meant for."""

    run_id: str
    task: str
    agent: str | None
    submitted_at: float


@dataclass(frozen=True)
class SealedEntry:
    """A ledger entry with the checksum it was written with (None: written before checksums)."""

    entry: LedgerEntry
    checksum: str | None


def seal(entry: LedgerEntry) -> SealedEntry:
    """``entry`` with its checksum (CRC-32 of its compact JSON), ready to be stored."""
    return SealedEntry(entry, entry_checksum(entry))


def entry_checksum(entry: LedgerEntry) -> str:
    return checksum(dumps(entry.to_json()))


class Backend(ABC):
    """The primitives of one store. Safe to call from several threads at once.

    Run ids reaching a primitive are already checked safe (a file name, a SQL value, a URL
    segment). ``capabilities`` and ``durability`` are declared by the class, never probed."""

    url: str = ""
    capabilities: frozenset[str] = frozenset()
    durability: Durability = "memory"

    # ------------------------------------------------------------------ head and clock

    @abstractmethod
    def store_time(self) -> float:
        """Now, as a Unix time, on the clock leases are judged by (A6)."""

    @abstractmethod
    def read_head(self, run_id: str) -> RunHead | None:
        """The run's head, or None when the run has none (never saved, never leased)."""

    @abstractmethod
    def swap_head(self, run_id: str, expected: RunHead | None, new: RunHead) -> bool:
        """Compare-and-set the head (A4): write ``new`` iff the head equals ``expected``."""

    # ------------------------------------------------------------------ records

    @abstractmethod
    def write_record(
        self, save: EncodedSave, entries: Sequence[SealedEntry], *, expect_seq: int, fence: int | None
    ) -> None:
        """Write ``save`` (record, summary) and ``entries`` under A1 and A2; ``Refused`` if not."""

    @abstractmethod
    def replace_records(self, run_id: str, saves: Sequence[EncodedSave], *, expect_seq: int, fence: int | None) -> None:
        """Replace all records of the run by ``saves`` under A3; the head's seq becomes the last one."""

    @abstractmethod
    def records_after(self, run_id: str, after_seq: int = 0) -> list[StoredRecord]:
        """The run's records with seq > ``after_seq``, in seq order; [] when there are none."""

    def snapshot_seq(self, run_id: str) -> int:
        """The seq of the run's newest full snapshot record (0: none). Loading needs only it and
        the records after it. Default: reads the run's records and looks for the flag from the
        newest back (linear in the run); a backend that stores the flag answers in one query."""
        for record in reversed(self.records_after(run_id, 0)):
            try:
                if loads(record.body).get("snapshot") is True:
                    return record.seq
            except (ValueError, AttributeError):  # damaged: never a snapshot to start from
                continue
        return 0

    @abstractmethod
    def list_summaries(self) -> list[RunSummary]:
        """The summary of every run that has records (any order)."""

    @abstractmethod
    def remove_run(self, run_id: str) -> None:
        """Remove the run's head, records, ledger and submission. No error if absent."""

    # ------------------------------------------------------------------ effect ledger

    @abstractmethod
    def insert_entry(self, sealed: SealedEntry, *, fence: int | None) -> SealedEntry | None:
        """Insert-if-absent (A5): None when inserted, else the stored entry (nothing written)."""

    @abstractmethod
    def put_entry(self, sealed: SealedEntry, *, fence: int | None) -> None:
        """Insert or replace the entry for its key (A5 for the fence)."""

    @abstractmethod
    def get_entry(self, run_id: str, key: str) -> SealedEntry | None:
        """The entry stored for ``key`` in the run, or None."""

    @abstractmethod
    def list_entries(self, run_id: str) -> list[SealedEntry]:
        """Every entry of the run (any order)."""

    @abstractmethod
    def delete_entries(self, run_id: str, keys: Sequence[str]) -> None:
        """Delete those entries of the run (garbage collection decided above)."""

    # ------------------------------------------------------------------ submissions (claim)

    def add_submission(self, submission: Submission) -> Submission | None:
        """Queue it unless its run id is queued (None), else return the queued one. Only for
        backends declaring ``claim``."""
        raise NotImplementedError

    def list_submissions(self) -> list[Submission]:
        """Every queued submission, oldest first. Only for backends declaring ``claim``."""
        raise NotImplementedError

    def close(self) -> None:  # noqa: B027 - optional for backends without resources
        """Release connections and files. The store cannot be used afterwards."""
