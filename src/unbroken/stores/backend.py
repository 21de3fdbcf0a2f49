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
    one key of a run exactly one writes. Entries are keyed by (run id, key): no primitive called
    for one run reads or writes another run's entry, whatever its key. ``insert_entry`` and
    ``put_entry`` with a ``fence`` write only while the head's fence is ``fence`` (else ``Refused``).
A6. ``lease_time`` is the one clock leases are judged by, and no step of any machine's wall clock
    moves it, so a worker with a wrong clock can neither extend nor steal a lease: the server's
    clock where there is a server (PostgreSQL ``now()``, Redis ``TIME``, the S3 service's
    ``Date``), the boot clock for a store that serves one machine (``_boot_lease_clock``).
    ``store_time`` is a Unix time for people (a submission's ``submitted_at``).
A7. Durable when a write returns, at the level ``durability`` declares.

Reads return what is stored, damaged or not: checking is the job above the seam. A backend
raises ``StoreUnavailable`` (from its driver error) when it cannot reach its storage.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from typing import Literal, Protocol, runtime_checkable

from .. import codec, owners
from .._plain import Frozen
from ..codec import EncodedSave, PackedRecords, Segment, StoredRecord, checksum, dumps, loads
from ..state import Lease, LedgerEntry, RunSummary

Durability = Literal["memory", "process_crash", "power_loss"]
"""What a returned write survives: nothing past the process; a process crash; a power loss."""

Reach = Literal["process", "machine", "network"]
"""Who may share a backend's data at once: one process; the processes of one machine; processes
on many machines."""

CAPABILITIES = frozenset({"leases", "ledger", "multi_process", "multi_host", "claim"})
"""The names ``Store.capabilities`` may show (derived from ``Backend.reach`` and ``Queue``)."""


class Refused(Exception):
    """A conditional primitive found the head's seq or fence not as expected and wrote nothing."""


class RunHead(Frozen):
    """The small per-run row every write is conditional on."""

    __slots__ = ("expires_at", "fence", "owner", "seq")
    seq: int
    """The last acknowledged save record (0: none yet). A record missing up to it is damage."""
    fence: int
    """Bumped by every lease acquisition; writes carrying an older one are refused."""
    owner: str | None
    expires_at: float
    """When the lease ends, on ``lease_time``'s clock (not always a Unix time)."""

    def __init__(self, seq: int = 0, fence: int = 0, owner: str | None = None, expires_at: float = 0.0) -> None:
        set_field = object.__setattr__
        set_field(self, "seq", seq)
        set_field(self, "fence", fence)
        set_field(self, "owner", owner)
        set_field(self, "expires_at", expires_at)


class Submission(Frozen):
    """A run queued for workers by ``submit``: its task and the agent name it is meant for."""

    __slots__ = ("agent", "run_id", "submitted_at", "task")
    run_id: str
    task: str
    agent: str | None
    submitted_at: float

    def __init__(self, run_id: str, task: str, agent: str | None, submitted_at: float) -> None:
        set_field = object.__setattr__
        set_field(self, "run_id", run_id)
        set_field(self, "task", task)
        set_field(self, "agent", agent)
        set_field(self, "submitted_at", submitted_at)


class SealedEntry(Frozen):
    """A ledger entry with the checksum it was written with (None: written before checksums)."""

    __slots__ = ("checksum", "entry")
    entry: LedgerEntry
    checksum: str | None

    def __init__(self, entry: LedgerEntry, checksum: str | None) -> None:
        object.__setattr__(self, "entry", entry)
        object.__setattr__(self, "checksum", checksum)


def seal(entry: LedgerEntry) -> SealedEntry:
    """``entry`` with its checksum (CRC-32 of its compact JSON), ready to be stored."""
    return SealedEntry(entry, entry_checksum(entry))


def entry_checksum(entry: LedgerEntry) -> str:
    return checksum(dumps(entry.to_json()))


def is_snapshot(body: str | bytes) -> bool:
    """Whether a record body is a full snapshot (its ``snapshot`` flag), for a backend that does
    not store the flag beside the body. A damaged body is never a snapshot to start from."""
    try:
        record = loads(body)
    except ValueError:
        return False
    return isinstance(record, dict) and codec.is_snapshot(record)


def scan_for_snapshot(backend: Backend, run_id: str, upto_seq: int | None = None) -> int:
    """The newest snapshot's seq (at or before ``upto_seq``; 0: none) for a backend without a
    ``SnapshotIndex``: reads the run's records and looks for the flag from the newest back
    (linear in the run)."""
    for record in reversed(backend.records_after(run_id, 0)):
        if upto_seq is not None and record.seq > upto_seq:
            continue
        if is_snapshot(record.body):
            return record.seq
    return 0


def newest_snapshot_between(backend: Backend, run_id: str, lowest: int, top: int) -> int:
    """The seq of the newest snapshot record with ``lowest`` <= seq <= ``top`` (0: none), for a
    backend that keeps no snapshot flag: reads backwards in widening bounded ranges (16 records,
    then 32, ... up to 256 at a time), parsing only those bodies."""
    step = 16
    while top >= lowest:
        for record in reversed(backend.records_between(run_id, top - step, top)):
            if is_snapshot(record.body):
                return record.seq
        top, step = top - step, min(step * 2, 256)
    return 0


class ClaimedRun(Frozen):
    """A submitted run a worker has just claimed: its task, the agent name it was submitted
    for, and the lease the claim took (owner, fence, expiry on the store's clock)."""

    __slots__ = ("agent", "lease", "run_id", "task")
    run_id: str
    task: str
    agent: str | None
    lease: Lease

    def __init__(self, run_id: str, task: str, agent: str | None, lease: Lease) -> None:
        set_field = object.__setattr__
        set_field(self, "run_id", run_id)
        set_field(self, "task", task)
        set_field(self, "agent", agent)
        set_field(self, "lease", lease)


def claimable(head: RunHead | None, now: float) -> bool:
    """The claim rule for one queued run's lease, written once for every store: nobody holds
    it, or its lease expired on the lease clock (``now``) and its holder is not provably alive
    on this host (``owners.owner_is_alive``: a process here that lost its lease may still be
    acting, frozen or busy, and must not be raced). (Its phase is the other half: never one of
    ``base.UNCLAIMABLE_PHASES``.) A store claiming in one step (``OneStepClaim``) reads the
    candidates and their heads in the step that takes the lease and asks this function which
    ones it may take."""
    current = head or RunHead()
    if current.owner is None:
        return True
    return current.expires_at <= now and not owners.owner_is_alive(current.owner)


class Backend(ABC):
    """The primitives of one store. Safe to call from several threads at once.

    Run ids reaching a primitive are already checked safe (a file name, a SQL value, a URL
    segment): only ``Store`` calls a primitive, and it checks them at its door. ``reach`` and
    ``durability`` are declared by the class; optional abilities are declared by implementing
    a protocol below (``Queue``, the fast paths), checked once with ``isinstance``."""

    url: str = ""
    reach: Reach = "process"
    durability: Durability = "memory"
    concurrency: int = 1
    """How many threads may do this backend's work at once: the width of the pool of threads that
    ``Agent.arun`` and the integrations hand store work to (``stores.offload``), so the event
    loop never waits on the store. A backend with a connection pool answers its size (more
    threads would only queue for a connection). One behind one lock (memory, SQLite, files) keeps
    one: its work is CPU under the GIL, and every extra thread doing it makes the event loop wait
    longer for the GIL and the cores (docs/benchmarks.md)."""

    lease_clock_is_store_time: bool = False
    """``lease_time`` reads the same clock as ``store_time`` (a server's Unix clock: PostgreSQL,
    Redis), so one reading serves both: a lease acquisition takes the fence's floor
    (``base.next_fence``) from the reading its expiry is computed from, a round trip less. False
    (the default, always safe) for a lease clock of its own, such as the boot clock."""

    # ------------------------------------------------------------------ head and clock

    @abstractmethod
    def store_time(self) -> float:
        """Now, as a Unix time, for people (the server's clock where there is one)."""

    def lease_time(self) -> float:
        """Now on the clock leases are judged by (A6). Default: ``store_time``, right for a
        backend whose ``store_time`` is its server's clock; a store that serves one machine
        returns the boot clock (``_boot_lease_clock.BootLeaseClock``)."""
        return self.store_time()

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

    def records_between(self, run_id: str, after_seq: int, upto_seq: int) -> list[StoredRecord]:
        """The run's records with ``after_seq`` < seq <= ``upto_seq``, in seq order ([] when none).
        Bounded: a backend reads only those records, whatever the run's length (paging: history,
        export, the inspector). A record lost inside the range is left out or comes back failing
        its checksum, as in ``records_after``. Default: filters ``records_after`` (unbounded;
        every shipped backend overrides it; docs/stores.md lists what each one reads)."""
        return [record for record in self.records_after(run_id, after_seq) if record.seq <= upto_seq]

    @abstractmethod
    def list_summaries(self) -> list[RunSummary]:
        """The summary of every run that has records (any order)."""

    def summaries_page(self, after: tuple[float, str] | None, limit: int) -> list[RunSummary]:
        """Up to ``limit`` run summaries, most recently updated first (``updated_at`` descending,
        then ``run_id`` descending), strictly after the cursor ``after`` = (updated_at, run_id)
        of the last row of the previous page (None: the first page); a short page is the last.
        A run saved between two pages moves ahead of the cursor: later pages do not show it (a
        run whose ``updated_at`` went back could show twice). Bounded: a backend with an index
        reads about ``limit`` rows. Default: sorts ``list_summaries`` (reads every run)."""
        rows = sorted(self.list_summaries(), key=lambda row: (row.updated_at, row.run_id), reverse=True)
        if after is not None:
            rows = [row for row in rows if (row.updated_at, row.run_id) < after]
        return rows[:limit]

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

    def entries_page(self, run_id: str, before: tuple[float, str] | None, limit: int) -> list[SealedEntry]:
        """Up to ``limit`` of the run's ledger entries, newest first (``created_at`` descending,
        then ``key`` descending), strictly before the cursor ``before`` = (created_at, key) of the
        last entry of the previous page (None: from the newest); a short page is the last.
        Bounded where the ledger is indexed by (run_id, created_at) (SQLite, Postgres: about
        ``limit`` rows). Default: sorts ``list_entries`` (reads every entry of the run)."""
        rows = sorted(self.list_entries(run_id), key=lambda s: (s.entry.created_at, s.entry.key), reverse=True)
        if before is not None:
            rows = [s for s in rows if (s.entry.created_at, s.entry.key) < before]
        return rows[:limit]

    @abstractmethod
    def delete_entries(self, run_id: str, keys: Sequence[str]) -> None:
        """Delete those entries of the run (garbage collection decided above)."""

    def scrub(self) -> str:
        """After deletes that must not be recoverable (``erase``): make the deleted bytes
        unreadable where the backend can, and say what was done ("" when it can do nothing
        beyond the delete itself). Default: nothing."""
        return ""

    def close(self) -> None:  # noqa: B027 - optional for backends without resources
        """Release connections and files. The store cannot be used afterwards."""


class QueueBackend(Backend):
    """A backend that keeps a queue of submitted runs for workers (``Store.submit``,
    ``claim_runnable``): the two queue primitives, and reads with defaults over them that a
    backend with an index overrides. A ``Store`` over it has the ``Queue`` ability."""

    @abstractmethod
    def add_submission(self, submission: Submission) -> Submission | None:
        """Queue it unless its run id is queued (None), else return the queued one."""

    @abstractmethod
    def list_submissions(self) -> list[Submission]:
        """Every queued submission, oldest first."""

    def submission(self, run_id: str) -> Submission | None:
        """The submission of ``run_id``, or None. Default: scans ``list_submissions``; a SQL
        store reads one row."""
        return next((item for item in self.list_submissions() if item.run_id == run_id), None)

    def claimable_page(
        self, agent: str | None, blocked: frozenset[str], after: tuple[float, str] | None, limit: int
    ) -> list[Submission]:
        """Up to ``limit`` submissions (for ``agent``, or any when None) whose run's phase is not
        in ``blocked``, oldest first, strictly after the cursor ``after``; leases are checked
        above. Bounded on SQLite (one query on the queue's index). Default: reads the whole queue
        and every run's summary."""
        phases = {summary.run_id: summary.phase for summary in self.list_summaries()}
        page: list[Submission] = []
        for item in self.list_submissions():
            if after is not None and (item.submitted_at, item.run_id) <= after:
                continue
            if (agent is None or item.agent == agent) and phases.get(item.run_id) not in blocked:
                page.append(item)
                if len(page) >= limit:
                    break
        return page

    def phase_of(self, run_id: str) -> str | None:
        """The phase of the run's last save (None: none yet). Default: scans ``list_summaries``."""
        return next((summary.phase for summary in self.list_summaries() if summary.run_id == run_id), None)

    def unstarted_page(self, after: tuple[float, str] | None, limit: int) -> list[Submission]:
        """Up to ``limit`` submissions whose run has no save point yet, oldest first by
        (submitted_at, run_id), strictly after the cursor ``after``. Bounded on SQLite and
        PostgreSQL (one indexed query, about ``limit`` rows). Default: reads the whole queue
        and each run's head until the page is full."""
        page: list[Submission] = []
        for item in self.list_submissions():
            if after is not None and (item.submitted_at, item.run_id) <= after:
                continue
            head = self.read_head(item.run_id)
            if head is None or head.seq == 0:
                page.append(item)
                if len(page) >= limit:
                    break
        return page

    def unstarted_with_heads(
        self, after: tuple[float, str] | None, limit: int
    ) -> list[tuple[Submission, RunHead | None]]:
        """``unstarted_page`` with each run's head (None: it has none): what a listing needs to
        mark a parked run. Default: ``unstarted_page``, then one ``read_head`` per row; a store
        that reads the heads to choose the page (S3) returns those, saving a read per row."""
        return [(item, self.read_head(item.run_id)) for item in self.unstarted_page(after, limit)]


# ---------------------------------------------------------------------- declared abilities
#
# Each is a protocol a backend declares by implementing it; ``Store`` checks each with
# ``isinstance`` once, when it is built, and never probes a method.


@runtime_checkable
class Queue(Protocol):
    """The ``claim`` ability: a queue of submitted runs (``QueueBackend`` gives the reads)."""

    def add_submission(self, submission: Submission) -> Submission | None: ...
    def list_submissions(self) -> list[Submission]: ...
    def submission(self, run_id: str) -> Submission | None: ...
    def claimable_page(
        self, agent: str | None, blocked: frozenset[str], after: tuple[float, str] | None, limit: int
    ) -> list[Submission]: ...
    def phase_of(self, run_id: str) -> str | None: ...
    def unstarted_page(self, after: tuple[float, str] | None, limit: int) -> list[Submission]: ...
    def unstarted_with_heads(
        self, after: tuple[float, str] | None, limit: int
    ) -> list[tuple[Submission, RunHead | None]]: ...


@runtime_checkable
class RawReads(Protocol):
    """Fast path: the run's records with their bodies as UTF-8 bytes (no decode), [] for none."""

    def read_raw_records(self, run_id: str) -> list[StoredRecord]: ...


@runtime_checkable
class StreamedReads(Protocol):
    """Fast path: the run's records as bytes, yielded lazily in seq order from one consistent
    read, so a resume never holds the run's bytes beside its parsed state. Nothing for no run."""

    def iter_raw_records(self, run_id: str) -> Iterable[StoredRecord]: ...


@runtime_checkable
class SegmentReads(Protocol):
    """Fast path: ``StreamedReads`` that also hands over packed segments of older records
    (``codec.Segment``) as the backend keeps them, for the whole-state loader."""

    def iter_load_pieces(self, run_id: str) -> Iterable[StoredRecord | Segment]: ...


class SegmentSealer(Protocol):
    """Seals a segment a store has packed as one unit (``stores.encrypted``), or None: packed as it is."""

    def seal_segment(self, run_id: str, segment: Segment) -> Segment | None: ...


@runtime_checkable
class SealableSegments(Protocol):
    """The backend packs older records into segments (``SegmentReads``) and lets a sealer turn
    each into one sealed unit before it is written (``seal_segments_with``); its ranged reads
    hand such segments over whole (``pieces_between``: segments and loose records, seq order,
    one consistent read; ``upto_seq`` None for no bound), for the sealer's store to open."""

    def seal_segments_with(self, sealer: SegmentSealer) -> None: ...

    def pieces_between(self, run_id: str, after_seq: int, upto_seq: int | None) -> list[StoredRecord | Segment]: ...


@runtime_checkable
class BytesBodies(Protocol):
    """The backend keeps a record body given as bytes (``EncodedSave.body``) as those exact bytes
    and hands it back as bytes (a SQLite BLOB): an encrypted store gives it its sealed records
    raw, not as hex text (half the size: a 2.4 KB record needs no overflow page)."""

    def keeps_bytes_bodies(self) -> Literal[True]: ...


@runtime_checkable
class PackedReads(Protocol):
    """Fast path: every record body in one buffer (None: no records)."""

    def read_packed(self, run_id: str) -> PackedRecords | None: ...


@runtime_checkable
class SnapshotIndex(Protocol):
    """The backend finds a run's newest snapshot without reading the run (``snapshot_seq``
    overridden by an index or a bounded walk back): windowed loads start from it."""

    def snapshot_seq(self, run_id: str, upto_seq: int | None = None) -> int: ...


@runtime_checkable
class ServerCheck(Protocol):
    """A server whose durability settings can change while the store is open: checked again
    before every lease acquisition and claim (``InsufficientDurability`` when it no longer
    keeps what the URL asks)."""

    def check_server(self) -> Durability: ...


@runtime_checkable
class OneStepClaim(Protocol):
    """Fast path of ``Store.claim_runnable``: the claim rule (``claimable``, phases not in
    ``blocked``, oldest first, the agent filter, the limit; fence + 1, ``owner`` for ``ttl``)
    applied where each run's phase and lease are read in the same atomic step that takes the
    lease (one SQL transaction holding the rows' locks, one script that checks the holder is
    still the one judged, one compare-and-set per run). ``claimable`` itself is called, never
    re-stated: it alone asks whether the holder is alive on this host."""

    def claim_in_one_step(
        self, owner: str, ttl: float, *, agent: str | None, limit: int, blocked: frozenset[str]
    ) -> list[ClaimedRun]: ...
