"""The Store: every rule about saved runs, written once over the primitives of ``backend.py``.

A backend implements ``Backend`` (head compare-and-set, conditional record writes, ledger
insert-if-absent, the store's clock; the atomicity rules are stated there). ``Store`` adds the
rules: run-id checks, the fence and compare-and-set refusals with their messages, leases and
take-over, damage detection (checksums, a missing tail against the run's head, ledger entries
checked like records), decoding, ledger garbage collection, and submit/claim for workers.

``Store`` holds its backend (``store.backend``) and is the only caller of its primitives:
every module above the stores calls ``Store`` methods, which check the run id once, at the
door (a test pins both). A backend that can do something faster (one SQL statement instead of
three primitives) declares it by implementing a protocol of ``backend.py`` (``RawReads``,
``OneStepClaim``, ...), checked once here with ``isinstance`` when the store is built; the
rule stays here, and the contract suite checks the fast path keeps it.

Damage is never repaired here: a load raises ``CorruptCheckpoint`` and nothing is deleted.
Recovery is an operator act (``unbroken.ops.recover``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Self

from ..acceptance import REFUSED
from ..codec import MIGRATIONS, Decoded, EncodedSave, Migrations, PackedRecords, Segment, StoredRecord, decode
from ..errors import (
    ConcurrentSave,
    CorruptCheckpoint,
    EncryptionKeyMissing,
    LeaseHeld,
    LeaseLost,
    RunNotFound,
    RunQueued,
    StoreDataLost,
    StoreUnavailable,
    TaskMismatch,
    UnbrokenError,
    Unsupported,
)
from ..state import (
    TERMINAL_PHASES,
    Lease,
    LedgerEntry,
    RunState,
    RunSummary,
    SaveInfo,
    check_run_id,
    check_task,
    new_run_id,
)
from .backend import (
    CAPABILITIES,
    Backend,
    ClaimedRun,
    Durability,
    OneStepClaim,
    PackedReads,
    Queue,
    RawReads,
    Refused,
    RunHead,
    SealedEntry,
    SegmentReads,
    ServerCheck,
    SnapshotIndex,
    StreamedReads,
    Submission,
    claimable,
    entry_checksum,
    scan_for_snapshot,
    seal,
)

UNCLAIMABLE_PHASES = TERMINAL_PHASES | {"paused", "awaiting_approval"}
"""Phases a worker never claims: finished, or waiting for a person to act first."""
CLAIM_PAGE = 64  # submissions a claim reads at a time
SUGGEST_FROM = 500  # run ids a "did you mean" compares a missing one with: one bounded page
_CAS_ATTEMPTS = 50  # a head only moves when someone saves or leases; 50 misses in a row is a fault

__all__ = ["CAPABILITIES", "ClaimedRun", "Store", "data_lost", "next_fence"]


def next_fence(previous: int, store_time: float) -> int:
    """The fence a new holder of a run gets: above the run's stored fence, and never below the
    store's clock in microseconds (``store_time``: a Unix time on the store's clock).

    The floor is what survives a store that lost everything (a Redis restarted empty, a
    database restored from an old backup): counting from the stored fence alone would hand a
    new holder the number a live holder from before the loss still writes under. Every fence is
    at most the store's clock (in us) when it was handed out, plus the number of acquisitions of
    that run within one microsecond (each is several store round trips: none), so a fence handed
    out after the loss is higher than any handed out before it, unless the store's clock went
    back over the loss. An integer JSON carries exactly until the year 2255 (2**53 us)."""
    return max(previous + 1, int(store_time * 1_000_000))


def data_lost(
    run_id: str, head: RunHead | None, *, fence: int, expect_seq: int = 0, owner: str | None = None
) -> StoreDataLost | None:
    """The one rule telling lost data from a lost lease, for the holder of ``fence`` whose
    write or renewal was just refused, given the head as stored now: ``StoreDataLost`` when
    that head cannot be another holder's (fences and save numbers only grow, and every new
    holder bumps the fence), else None (another holder took the run: ``LeaseLost``).

    ``expect_seq`` is the save the holder saw stored under its fence; ``owner`` its name
    (known to a renewal). A fence that went backwards or a head that is gone can only come from
    a store that lost data (a server restarted empty, evicted keys) or a run deleted under
    its holder; so can the same fence under another owner (fences restarted from nothing)."""
    if head is None or head == RunHead():  # an empty head is no head (the file store may show one)
        what = "its head is gone (the run has no lease, no save number, no fence any more)"
    elif head.fence < fence:
        what = f"its fence went back from {fence} to {head.fence}"
    elif head.seq < expect_seq:
        what = f"its save number went back from {expect_seq} to {head.seq}" + (
            " under this holder's own fence"
            if head.fence == fence
            else f" and another holder took it (fence {head.fence})"
        )
    elif head.fence == fence and owner is not None and head.owner is not None and head.owner != owner:
        what = f"its fence {fence} now names another holder ({head.owner}): fences restarted from nothing"
    else:
        return None
    return StoreDataLost(
        f"run {run_id!r}: {what}, while this process held its lease (fence {fence}). {StoreDataLost()}"
    )


class Store:
    """A place where runs are saved: the rules, over the primitives of ``backend``. Safe to
    share between threads of one process.

    ``capabilities`` says what the backend supports beyond the core (for example
    ``multi_process``: several processes on one machine may use it at once); a feature the
    backend lacks raises ``Unsupported`` naming a store that has it."""

    sealed_read_from = 4096
    """A whole-state load of a run of at least this many save records reads its sealed segments
    with msgspec (``segment_read.records_of``: typed, each record's small fields left unparsed
    until the fold needs them; msgspec imported then); a shorter run reads each sealed segment in
    one orjson parse (``segment_read.dicts_of``), which gives the same state and, for fewer
    records, costs less than importing msgspec (~8-11 ms of CPU, ~45 M instructions; the typed
    parse saves ~10,000 instructions a record)."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        # What the backend declares beyond the primitives, checked once here (never probed later).
        self._queue = backend if isinstance(backend, Queue) else None
        self._raw = backend if isinstance(backend, RawReads) else None
        self._streamed = backend if isinstance(backend, StreamedReads) else None
        self._segments = backend if isinstance(backend, SegmentReads) else None
        self._packed = backend if isinstance(backend, PackedReads) else None
        self._snapshots = backend if isinstance(backend, SnapshotIndex) else None
        self._server = backend if isinstance(backend, ServerCheck) else None
        self._one_step_claim = backend if isinstance(backend, OneStepClaim) else None

    @property
    def url(self) -> str:
        """The URL this store was opened with (``open_store(store.url)`` opens it again)."""
        return self.backend.url

    @property
    def durability(self) -> Durability:
        """What a returned write survives (``Backend.durability``)."""
        return self.backend.durability

    @property
    def concurrency(self) -> int:
        """How many threads may do this store's work at once (``Backend.concurrency``): the
        width of the pool of threads ``Agent.arun`` and the integrations hand store work to."""
        return self.backend.concurrency

    @property
    def capabilities(self) -> frozenset[str]:
        """``leases`` and ``ledger`` (every store), ``claim`` (a ``Queue`` backend: ``submit``
        and workers), ``multi_process`` and ``multi_host`` (its ``reach``). Names from
        ``CAPABILITIES``; derived from what the backend declares, never probed."""
        reach = {"process": (), "machine": ("multi_process",), "network": ("multi_process", "multi_host")}
        claim = ("claim",) if self._queue is not None else ()
        return frozenset(("leases", "ledger", *reach[self.backend.reach], *claim))

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.url}>"

    # ------------------------------------------------------------------ refusals

    def _refusal(self, run_id: str, expect_seq: int, fence: int | None) -> Exception:
        stored = self.backend.read_head(run_id)
        lost = data_lost(run_id, stored, fence=fence, expect_seq=expect_seq) if fence is not None else None
        if lost is not None:
            return lost
        head = stored or RunHead()
        if fence is not None and head.fence != fence:
            return LeaseLost(
                f"run {run_id!r} is now owned under fence {head.fence}, not {fence}; this write was refused"
            )
        return ConcurrentSave(f"run {run_id!r} is at save {head.seq}, not {expect_seq}; reload it")

    # ------------------------------------------------------------------ records

    def append(self, save: EncodedSave, *, expect_seq: int, fence: int | None = None) -> None:
        """Write one save record, its summary and its ledger entries, if and only if the run's
        head is ``expect_seq`` (0 for a new run) and, when ``fence`` is given, the run's fence
        token is ``fence``. The ledger entries are durable no later than the record. Durable
        when it returns (at the store's durability level). Raises ``LeaseLost``,
        ``ConcurrentSave`` or (the run's data vanished under this fence) ``StoreDataLost``,
        having written nothing."""
        run_id = check_run_id(save.run_id)
        if save.seq != expect_seq + 1:
            raise ValueError(f"save {save.seq} cannot follow save {expect_seq}; a save's seq is its predecessor's + 1")
        for entry in save.ledger:
            if entry.run_id != run_id:
                raise ValueError(f"ledger entry {entry.key!r} belongs to run {entry.run_id!r}, not {run_id!r}")
        sealed = [seal(entry) for entry in save.ledger] if save.ledger else []  # (most saves: no entries)
        try:
            self.backend.write_record(save, sealed, expect_seq=expect_seq, fence=fence)
        except Refused:
            raise self._refusal(run_id, expect_seq, fence) from None

    def rewrite(self, run_id: str, saves: Sequence[EncodedSave], *, expect_seq: int, fence: int | None = None) -> None:
        """Atomically replace all records of the run (migration, compaction, recovery), under
        the same head and fence condition as ``append``."""
        check_run_id(run_id)
        if not saves:
            raise ValueError("rewrite needs at least one save record")
        try:
            self.backend.replace_records(run_id, saves, expect_seq=expect_seq, fence=fence)
        except Refused:
            raise self._refusal(run_id, expect_seq, fence) from None

    def read_records(self, run_id: str) -> list[StoredRecord]:
        """All save records of the run, in seq order, as stored. Raises ``RunNotFound``."""
        records = self.backend.records_after(check_run_id(run_id), 0)
        if not records:
            raise self._not_found(run_id)
        return records

    def read_raw_records(self, run_id: str) -> list[StoredRecord]:
        """``read_records`` for the loader: a backend may return bodies as UTF-8 bytes here to
        spare a decode on resume (``RawReads``). Raises ``RunNotFound``."""
        if self._raw is None:
            return self.read_records(run_id)
        records = self._raw.read_raw_records(check_run_id(run_id))
        if not records:
            raise self._not_found(run_id)
        return records

    def iter_raw_records(self, run_id: str) -> Iterable[StoredRecord]:
        """``read_raw_records`` for the loader, which checks, parses and drops each record as it
        comes: a backend may yield them lazily (``StreamedReads``: seq order, one consistent
        read) so a resume never holds the run's bytes beside its parsed state. A backend without
        it gives ``read_raw_records`` (``RunNotFound`` for no run); one with it yields nothing."""
        if self._streamed is None:
            return self.read_raw_records(run_id)
        return self._streamed.iter_raw_records(check_run_id(run_id))

    def iter_load_pieces(self, run_id: str) -> Iterable[StoredRecord | Segment]:
        """``iter_raw_records`` for the whole-state loader, which also takes packed segments of
        older records (``codec.Segment``, seq order, one consistent read): a backend that packs
        records hands them over as it keeps them (``SegmentReads``)."""
        if self._segments is None:
            return self.iter_raw_records(run_id)
        return self._segments.iter_load_pieces(check_run_id(run_id))

    def read_packed(self, run_id: str) -> PackedRecords | None:
        """All record bodies in one buffer for the loader's fastest path (``PackedReads``), or
        None when the backend has no such read or the run no records (the loader then uses
        ``read_raw_records``)."""
        check_run_id(run_id)
        return None if self._packed is None else self._packed.read_packed(run_id)

    # ------------------------------------------------------------------ paged and partial reads

    def head_of(self, run_id: str) -> RunHead | None:
        """The run's head as stored (its last save's seq and its lease, live or expired), or
        None when the run has none. For a reader that must know how far the run goes."""
        return self.backend.read_head(check_run_id(run_id))

    def lease_now(self) -> float:
        """Now on the clock this store judges leases by (``Backend.lease_time``; not always a
        Unix time): compare a lease's ``expires_at`` with it, never with a local clock."""
        return self.backend.lease_time()

    def store_now(self) -> float:
        """Now, as a Unix time for people (the server's clock where there is one)."""
        return self.backend.store_time()

    def records_since(self, run_id: str, after_seq: int = 0) -> list[StoredRecord]:
        """The run's records with seq > ``after_seq``, in seq order, as stored (unchecked:
        the caller checks them, as ``codec`` does); [] when there are none."""
        return self.backend.records_after(check_run_id(run_id), after_seq)

    def records_in(self, run_id: str, after_seq: int, upto_seq: int) -> list[StoredRecord]:
        """The run's records with ``after_seq`` < seq <= ``upto_seq``, in seq order, as stored;
        bounded (reads only those on every shipped backend; docs/stores.md)."""
        return self.backend.records_between(check_run_id(run_id), after_seq, upto_seq)

    @property
    def indexes_snapshots(self) -> bool:
        """Whether ``newest_snapshot`` is answered without reading the whole run (the backend
        declares ``SnapshotIndex``; every shipped backend does)."""
        return self._snapshots is not None

    def newest_snapshot(self, run_id: str, upto_seq: int | None = None) -> int:
        """The seq of the run's newest full snapshot record (0: none), or of the newest one at or
        before ``upto_seq`` when given. Loading needs only it and the records after it. Without
        ``SnapshotIndex``: reads the run's records and looks for the flag from the newest back."""
        check_run_id(run_id)
        if self._snapshots is not None:
            return self._snapshots.snapshot_seq(run_id, upto_seq)
        return scan_for_snapshot(self.backend, run_id, upto_seq)

    def runs_page(self, after: tuple[float, str] | None, limit: int) -> list[RunSummary]:
        """Up to ``limit`` run summaries, most recently updated first, strictly after the cursor
        ``after`` = (updated_at, run_id) of the previous page's last row (``Backend.summaries_page``)."""
        return self.backend.summaries_page(after, limit)

    def scrub_deleted(self) -> str:
        """After deletes that must not be recoverable (``erase``): make the deleted bytes
        unreadable where the backend can, and say what was done ("" when nothing more)."""
        return self.backend.scrub()

    def list_runs(self) -> list[RunSummary]:
        """A summary of every stored run, most recently updated first."""
        return sorted(self.backend.list_summaries(), key=lambda row: row.updated_at, reverse=True)

    def delete_run(self, run_id: str) -> None:
        """Remove the run, its ledger and its lease. Safe to call twice."""
        self.backend.remove_run(check_run_id(run_id))

    def why_missing(self, run_id: str) -> RunNotFound | CorruptCheckpoint:
        """The error telling why ``run_id`` has no save records, as ``load`` would raise it:
        ``CorruptCheckpoint`` when its head says records were saved (they were lost),
        ``RunQueued`` when it is queued and not started yet, else ``RunNotFound`` (naming the
        stored run ids closest to it). Reads the head, and the queue when it has to."""
        return self._not_found(check_run_id(run_id))

    def _not_found(self, run_id: str) -> RunNotFound | CorruptCheckpoint:
        head = self.backend.read_head(run_id)
        if head is not None and head.seq > 0:
            return CorruptCheckpoint(
                f"run {run_id!r} has lost all its save records (its head says save {head.seq}); nothing was "
                f"changed. Restore the store from a backup, or delete the run",
                last_good_seq=0,
            )
        if self._queue is not None and self._queue.submission(run_id) is not None:
            return RunQueued(
                f"run {run_id!r} in {self.url} is queued (submitted, not started yet): a worker on this "
                "store starts it (`unbroken worker --agent module:attr --until-idle`, with its --store)"
            )
        # A run id with a head (its lease taken, no save yet: a run being started) is no typo, and
        # the suggestion (a page of run ids through difflib, ~10 ms of Python holding the GIL) is
        # skipped: every new run's first load lands here, many at once under ``arun``.
        hint = self._did_you_mean(run_id) if head is None else ""
        return RunNotFound(f"no run {run_id!r} in {self.url}{hint}")

    def _did_you_mean(self, run_id: str) -> str:
        """``; did you mean 'x'?`` naming the stored run ids closest to a mistyped one, from one
        bounded page (the most recently updated runs), or "" when none is close."""
        try:
            known = [row.run_id for row in self.backend.summaries_page(None, SUGGEST_FROM)]
        except UnbrokenError:  # a suggestion is a courtesy: the run is not found either way
            return ""
        import difflib  # (here: ~2 ms of import a resume never needs)

        near = difflib.get_close_matches(run_id, known, n=3, cutoff=0.6)
        return f"; did you mean {' or '.join(map(repr, near))}?" if near else ""

    # ------------------------------------------------------------------ loading

    def decode(
        self, run_id: str, *, recover: bool = False, migrations: Migrations = MIGRATIONS, keep_records: bool = True
    ) -> Decoded:
        """Read and fold the run's records, checking each (see ``codec.decode``) and that none is
        missing up to the run's head. Damage raises ``CorruptCheckpoint`` and changes nothing;
        ``recover=True`` is for showing a damaged run (the last intact save point, with
        ``Decoded.problem`` saying what is wrong), never for continuing it. ``keep_records=False``
        lets each parsed record go once folded (``Decoded.records`` and ``timeline`` are then
        empty): for a caller that wants the state only, faster and with less memory."""
        check_run_id(run_id)
        # The head first: saves only add records (a rewrite moves the head forward), so every
        # record up to the head read here is in the read below, however many saves land in
        # between. Read after, a save landing between the two reads looked like a lost tail.
        head = self.backend.read_head(run_id)
        packed = self.read_packed(run_id)
        try:
            if packed is None:
                records = self.iter_load_pieces(run_id)
                sealed = head is not None and head.seq >= self.sealed_read_from
                decoded = decode(
                    run_id, records, recover=recover, migrations=migrations, keep_records=keep_records, sealed=sealed
                )
            else:
                decoded = decode(
                    run_id,
                    packed,
                    recover=recover,
                    migrations=migrations,
                    fallback=lambda: self.read_raw_records(run_id),
                    keep_records=keep_records,
                )
        except CorruptCheckpoint as exc:
            if exc.last_good_seq == 0 and not self.backend.records_after(run_id, 0):
                raise self._not_found(run_id) from None
            raise
        except EncryptionKeyMissing as exc:  # a sealed record read without keys: name the key it needs
            raise self.key_missing(run_id, exc) from None
        if head is not None and decoded.problem is None and decoded.last_seq < head.seq:
            problem = (
                f"save records {decoded.last_seq + 1}..{head.seq} of run {run_id!r} are missing "
                f"(the run's head says it was saved up to {head.seq})"
            )
            if not recover:
                raise CorruptCheckpoint(
                    f"{problem}; the last intact save point is {decoded.last_seq}. Nothing was changed: "
                    f"`unbroken recover {run_id}` continues from it, keeping what is left aside",
                    last_good_seq=decoded.last_seq,
                )
            decoded.corrupt_seq, decoded.problem = decoded.last_seq + 1, problem
        return decoded

    def key_missing(self, run_id: str, found: EncryptionKeyMissing) -> EncryptionKeyMissing:
        """``found`` (a sealed record of the run met without keys) naming the key id the run's
        data key is wrapped under, or where that key is kept (``_data_keys.needs_key``)."""
        from ._data_keys import needs_key

        return needs_key(self.backend, check_run_id(run_id), found)

    def load(self, run_id: str, *, recover: bool = False) -> RunState:
        """The run's state at its last save point. Raises ``RunNotFound``, ``CorruptCheckpoint``
        or ``IncompatibleSchema``; never returns a silently wrong or older state. ``recover=True``
        asks explicitly for the last intact save point of a damaged run (to show it)."""
        return self.decode(run_id, recover=recover, keep_records=False).state

    def history(self, run_id: str) -> list[SaveInfo]:
        """The run's save points, oldest first (a damaged run shows those before the damage)."""
        return self.decode(run_id, recover=True).timeline

    def exists(self, run_id: str) -> bool:
        """Whether the run has save records (or had: a run whose records were all lost exists, damaged)."""
        head = self.backend.read_head(check_run_id(run_id))
        return (head is not None and head.seq > 0) or bool(self.backend.records_after(run_id, 0))

    # ------------------------------------------------------------------ ledger

    def _checked(self, run_id: str, sealed: SealedEntry | None, key: str | None = None) -> LedgerEntry | None:
        if sealed is None:
            return None
        entry = sealed.entry
        if entry.run_id != run_id or (key is not None and entry.key != key):
            return None
        if sealed.checksum is not None and sealed.checksum != entry_checksum(entry):
            refused = sealed.checksum.startswith(REFUSED)  # (a reader's own finding: ``acceptance.REFUSED``)
            problem = sealed.checksum[len(REFUSED) :] if refused else "fails its checksum (edited or damaged)"
            raise CorruptCheckpoint(
                f"effect ledger entry {entry.key!r} of run {run_id!r} {problem}; "
                "nothing was changed. Restore it from a backup; its result is not given to the model",
                last_good_seq=None,
            )
        return entry

    def ledger_claim(self, entry: LedgerEntry, *, fence: int | None = None) -> tuple[LedgerEntry, bool]:
        """Insert ``entry`` unless its key exists. Returns (the stored entry, whether it was
        inserted now). Atomic across threads and processes: of two claims of one key, one wins."""
        run_id = check_run_id(entry.run_id)
        try:
            existing = self.backend.insert_entry(seal(entry), fence=fence)
        except Refused:
            raise self._refusal(run_id, 0, fence) from None
        if existing is None:
            return entry.replace(), True
        stored = self._checked(run_id, existing, entry.key)
        if stored is None:  # the backend answered with an entry of another run or key: never use it
            raise CorruptCheckpoint(
                f"effect ledger entry {entry.key!r} of run {run_id!r} is stored as run {existing.entry.run_id!r}'s "
                f"entry {existing.entry.key!r} (edited or damaged); nothing was changed. Restore it from a backup",
                last_good_seq=None,
            )
        return stored, False

    def ledger_put(self, entry: LedgerEntry, *, fence: int | None = None) -> None:
        """Insert or replace the entry for ``entry.key``."""
        run_id = check_run_id(entry.run_id)
        try:
            self.backend.put_entry(seal(entry), fence=fence)
        except Refused:
            raise self._refusal(run_id, 0, fence) from None

    def ledger_get(self, run_id: str, key: str) -> LedgerEntry | None:
        """The entry for ``key`` in run ``run_id``, or None. ``CorruptCheckpoint`` if damaged."""
        return self._checked(check_run_id(run_id), self.backend.get_entry(run_id, key), key)

    def ledger_list(self, run_id: str) -> list[LedgerEntry]:
        """Every ledger entry of the run, oldest first. ``CorruptCheckpoint`` if one is damaged."""
        check_run_id(run_id)
        rows = [self._checked(run_id, sealed) for sealed in self.backend.list_entries(run_id)]
        return sorted((e for e in rows if e is not None), key=lambda e: (e.created_at, e.key))

    def ledger_page(
        self, run_id: str, *, before: tuple[float, str] | None = None, limit: int = 100
    ) -> list[LedgerEntry]:
        """Up to ``limit`` ledger entries of the run, newest first ((created_at, key) descending),
        strictly before the cursor ``before`` ((created_at, key) of the oldest entry shown; None:
        the newest). Concatenated, the pages are ``ledger_list`` reversed. ``CorruptCheckpoint``
        if an entry of the page is damaged (damage elsewhere is reported by ``ledger_list``).
        Bounded on SQLite and Postgres (``entries_page``); others read every entry."""
        check_run_id(run_id)
        page: list[LedgerEntry] = []
        while len(page) < limit:
            ask = limit - len(page)
            rows = self.backend.entries_page(run_id, before, ask)
            for sealed in rows:
                before = (sealed.entry.created_at, sealed.entry.key)
                entry = self._checked(run_id, sealed)
                if entry is not None:
                    page.append(entry)
            if len(rows) < ask:
                break
        return page

    def ledger_stored(self, run_id: str) -> int:
        """How many ledger entries the run has as stored, damaged or unreadable ones included
        (what an erase removes)."""
        return len(self.backend.list_entries(check_run_id(run_id)))

    def ledger_gc(self, older_than: float) -> int:
        """Delete ledger entries last updated before ``older_than`` (a Unix time) that belong
        to finished runs; never those of a run that is still live. Returns how many."""
        rows, kept = self._ledger_as_stored()
        removed = 0
        for summary in rows.list_summaries():
            if summary.phase not in TERMINAL_PHASES:
                continue
            doomed = [
                s.entry.key
                for s in rows.list_entries(summary.run_id)
                if s.entry.updated_at < older_than and s.entry.key not in kept
            ]
            if doomed:
                rows.delete_entries(summary.run_id, doomed)
                removed += len(doomed)
        return removed

    def _ledger_as_stored(self) -> tuple[Backend, frozenset[str]]:
        """Where ``ledger_gc`` reads and deletes the rows, and the ledger keys it never collects
        (a hook: an encrypted store's rows as stored, its data key entries kept)."""
        return self.backend, frozenset()

    # ------------------------------------------------------------------ leases

    def acquire_lease(self, run_id: str, owner: str, ttl: float, *, takeover_from: str | None = None) -> Lease:
        """Take the run's lease for ``ttl`` seconds and bump its fence token. Succeeds if the
        run has no live lease (expiry judged on the store's lease clock), if ``owner`` already holds
        it, or if the holder is ``takeover_from`` (the caller proved it dead). Else ``LeaseHeld``.
        A server whose durability settings can change (``ServerCheck``) is checked first."""
        check_run_id(run_id)
        if self._server is not None:
            self._server.check_server()
        for _ in range(_CAS_ATTEMPTS):
            head = self.backend.read_head(run_id)
            now = self.backend.lease_time()
            current = head or RunHead()
            if current.owner is not None and current.expires_at > now and current.owner not in (owner, takeover_from):
                raise LeaseHeld(f"run {run_id!r} is held by {current.owner} for {current.expires_at - now:.1f}s more")
            store_now = now if self.backend.lease_clock_is_store_time else self.backend.store_time()
            new = RunHead(current.seq, next_fence(current.fence, store_now), owner, now + ttl)
            if self.backend.swap_head(run_id, head, new):
                return Lease(run_id, owner, new.fence, new.expires_at, previous_fence=current.fence)
        raise StoreUnavailable(f"the lease of run {run_id!r} kept changing under {_CAS_ATTEMPTS} attempts; retry")

    def renew_lease(self, lease: Lease, ttl: float) -> Lease:
        """Extend the lease; ``LeaseLost`` if its fence is no longer current, ``StoreDataLost``
        if the run's head vanished or went backwards (``data_lost``)."""
        for _ in range(_CAS_ATTEMPTS):
            head = self.backend.read_head(lease.run_id)
            if head is None or head.fence != lease.fence or head.owner != lease.owner:
                lost = data_lost(lease.run_id, head, fence=lease.fence, owner=lease.owner)
                if lost is not None:
                    raise lost
                raise LeaseLost(f"lease on run {lease.run_id!r} (fence {lease.fence}) was taken over")
            new = head.replace(expires_at=self.backend.lease_time() + ttl)
            if self.backend.swap_head(lease.run_id, head, new):
                return lease.replace(expires_at=new.expires_at)
        raise StoreUnavailable(f"the lease of run {lease.run_id!r} kept changing; retry")

    def release_lease(self, lease: Lease) -> None:
        """Give the lease up (no-op if it was already lost)."""
        for _ in range(_CAS_ATTEMPTS):
            head = self.backend.read_head(lease.run_id)
            if head is None or head.fence != lease.fence or head.owner is None:
                return
            if self.backend.swap_head(lease.run_id, head, head.replace(owner=None, expires_at=0.0)):
                return

    def lease_of(self, run_id: str) -> Lease | None:
        """The run's current lease holder, or None when nobody holds a live lease."""
        head = self.backend.read_head(check_run_id(run_id))
        if head is None or head.owner is None or head.expires_at <= self.backend.lease_time():
            return None
        return Lease(run_id, head.owner, head.fence, head.expires_at)

    def park(self, run_id: str, holder: str, seconds: float) -> bool:
        """Hand a queued run's lease to ``holder`` (not a process: ``unbroken.lost``) for
        ``seconds`` on the lease clock, with a new fence, so no worker claims it and its writer is
        fenced off. False (nothing written) when the run is not queued for workers or ``holder``
        holds it already. Durable when it returns; of racing callers the head's compare-and-set
        decides."""
        check_run_id(run_id)
        if self._queue is None or self._queue.submission(run_id) is None:
            return False
        for _ in range(_CAS_ATTEMPTS):
            head = self.backend.read_head(run_id)
            if head is not None and head.owner == holder:
                return False
            current = head or RunHead()
            fence = next_fence(current.fence, self.backend.store_time())
            parked = RunHead(current.seq, fence, holder, self.backend.lease_time() + seconds)
            if self.backend.swap_head(run_id, head, parked):
                return True
        raise StoreUnavailable(f"the head of run {run_id!r} kept changing under {_CAS_ATTEMPTS} attempts; retry")

    def unpark(self, run_id: str, holder: str) -> RunHead | None:
        """Lift a park by ``holder`` (``park``): the run's lease freed, with a new fence, so
        workers may take it again. Returns the head as it is now, or None (nothing written) when
        ``holder`` does not hold the run."""
        check_run_id(run_id)
        for _ in range(_CAS_ATTEMPTS):
            head = self.backend.read_head(run_id)
            if head is None or head.owner != holder:
                return None
            free = RunHead(head.seq, next_fence(head.fence, self.backend.store_time()), None, 0.0)
            if self.backend.swap_head(run_id, head, free):
                return free
        raise StoreUnavailable(f"the head of run {run_id!r} kept changing under {_CAS_ATTEMPTS} attempts; retry")

    # ------------------------------------------------------------------ claiming (workers)

    def _unsupported(self, doing: str) -> Unsupported:
        return Unsupported(
            f"{type(self).__name__} ({self.url}) cannot {doing}; use sqlite:///FILE "
            "(several processes on one machine) or postgresql://... (many machines)"
        )

    def submit(self, task: str, run_id: str | None = None, *, agent: str | None = None) -> str:
        """Record a run for workers to pick up (a run with no save point yet) and return its
        run id (a new ``run-...`` id when none is given). ``agent`` names the agent meant to run
        it; workers started for another agent name leave it alone. Durable when it returns;
        safe to call twice with the same run id and task. Raises ``TaskMismatch`` if the run id
        holds another task, ``Unsupported`` on stores without the ``claim`` capability."""
        run_id = check_run_id(run_id if run_id is not None else new_run_id())
        if self._queue is None:
            raise self._unsupported("queue runs for workers")
        check_task(task)
        head = self.backend.read_head(run_id)
        if head is not None and head.seq > 0:  # a saved run keeps its task: checked before queuing it
            self._same_task(run_id, task, self._saved_task(run_id, task))
        queued = self._queue.add_submission(Submission(run_id, task, agent, self.backend.store_time()))
        self._same_task(run_id, task, queued.task if queued is not None else task)
        return run_id

    def _saved_task(self, run_id: str, default: str) -> str:
        """The task of saved run ``run_id`` (``default`` if no summary shows it)."""
        return next((s.task for s in self.backend.list_summaries() if s.run_id == run_id), default)

    @staticmethod
    def _same_task(run_id: str, task: str, held: str) -> None:
        if held != task:
            raise TaskMismatch(
                f"run {run_id!r} already exists with task {held[:80]!r}; submit the same task or use another run id"
            )

    def claim_runnable(self, owner: str, ttl: float, *, agent: str | None = None, limit: int = 1) -> list[ClaimedRun]:
        """Claim up to ``limit`` submitted runs (for ``agent``, or any when None) that are not
        finished or paused and whose lease is free or expired on the store's lease clock (and
        whose holder is not provably alive on this host): each gets
        ``owner`` as lease holder for ``ttl`` seconds and a new fence token. Two concurrent
        callers never claim the same run (the head's compare-and-set decides)."""
        if self._queue is None:
            raise self._unsupported("hand runs to workers")
        if self._server is not None:
            self._server.check_server()
        blocked = frozenset(UNCLAIMABLE_PHASES)
        if self._one_step_claim is not None:
            return self._one_step_claim.claim_in_one_step(owner, ttl, agent=agent, limit=limit, blocked=blocked)
        picked: list[tuple[Submission, RunHead | None, float]] = []
        after: tuple[float, str] | None = None
        while len(picked) < limit:  # a page of the queue at a time: a long queue is not read whole
            page = self._queue.claimable_page(agent, blocked, after, CLAIM_PAGE)
            for queued in page:
                head = self.backend.read_head(queued.run_id)
                now = self.backend.lease_time()
                if claimable(head, now):
                    picked.append((queued, head, now))
                    if len(picked) >= limit:
                        break
            if len(page) < CLAIM_PAGE:
                break
            after = (page[-1].submitted_at, page[-1].run_id)
        claimed: list[ClaimedRun] = []
        for queued, head, now in picked:
            # The phase again, read after the head: a run that finished before its head was
            # read shows it here; one that finished after moved its head, so its swap fails.
            if self._queue.phase_of(queued.run_id) in blocked:
                continue
            current = head or RunHead()
            new = RunHead(current.seq, next_fence(current.fence, self.backend.store_time()), owner, now + ttl)
            if self.backend.swap_head(queued.run_id, head, new):
                lease = Lease(queued.run_id, owner, new.fence, new.expires_at, previous_fence=current.fence)
                claimed.append(ClaimedRun(queued.run_id, queued.task, queued.agent, lease))
        return claimed

    # ------------------------------------------------------------------ queue reads

    def queued_runs(self) -> list[Submission]:
        """Every queued submission, oldest first ([] on a store without ``claim``)."""
        return [] if self._queue is None else self._queue.list_submissions()

    def queued(self, run_id: str) -> Submission | None:
        """The submission of ``run_id`` (None: not queued, or a store without ``claim``)."""
        check_run_id(run_id)
        return None if self._queue is None else self._queue.submission(run_id)

    def unstarted_runs(self, after: tuple[float, str] | None, limit: int) -> list[Submission]:
        """Up to ``limit`` queued runs with no save point yet, oldest first, strictly after the
        cursor ``after`` = (submitted_at, run_id) ([] on a store without ``claim``)."""
        return [] if self._queue is None else self._queue.unstarted_page(after, limit)

    def unstarted_runs_and_heads(
        self, after: tuple[float, str] | None, limit: int
    ) -> list[tuple[Submission, RunHead | None]]:
        """``unstarted_runs`` with each run's head as read (None: it has none): what a listing
        needs to mark a run parked as lost ([] on a store without ``claim``)."""
        return [] if self._queue is None else self._queue.unstarted_with_heads(after, limit)

    def close(self) -> None:
        """Release the backend's connections and files. The store cannot be used afterwards."""
        self.backend.close()

    # ------------------------------------------------------------------ lifetime

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
