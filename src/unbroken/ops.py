"""Operations on stored runs, for people and tools: the command line, the web inspector and your
own code call the same functions. Each takes an open ``Store``, prints nothing, and raises an
``UnbrokenError`` subclass for anything a caller can act on.

* ``open_existing_store``: open a store that must already exist (a typo creates nothing).
* ``inspect_run``, ``list_all_runs``, ``queued_runs``: what a store holds, queued runs included;
  ``runs_page``, ``iter_runs``: the runs a page at a time (``unbroken runs``).
* ``ledger_of``, ``ledger_before``: a run's effect ledger (whole or a page), and whether it may
  have been collected.
* ``export_run``: a run's whole state, save points and ledger as one JSON document (in memory);
  ``export_run_to``: the same document written as it is read (constant memory).
* ``plan_migration``, ``migrate_run``: bring a run's records to the current schema.
* ``resolve_call``: settle, by hand, a call whose outcome is unknown.
* ``approve``, ``deny``, ``pending_approvals``: decide a tool call waiting for a person (``unbroken.approvals``).
* ``fork``, ``rewind``: a run sharing another's history up to a save point (``unbroken.fork``).
* ``follow``, ``settlements``: watch a live run; where it resumed after crashes and how (``unbroken.watching``).
* ``import_run``: a checkpoint file written by another harness, as a run (``unbroken.importing``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

from . import clock, lost, paging
from .approvals import ApprovalRequest, decide, pending_approvals
from .codec import MIGRATIONS, Decoded, StoredRecord, encode_full, peek_version, reads_natively
from .erasure import Erasure, erase
from .errors import ConfigError, CorruptCheckpoint, IncompatibleSchema, RunNotFound, StoreUnavailable
from .fork import Fork, fork, rewind
from .importing import import_run
from .key_rotation import KeyRotation, RotationCursor, rotate_all, rotate_keys
from .leases import acquire, make_owner, owner_is_dead
from .resolve import resolve_call
from .retention import DAY, Retention, RetentionReport, apply_retention
from .state import TERMINAL_PHASES, JSONValue, Lease, LedgerEntry, RunState, RunSummary, SaveInfo, check_run_id
from .stores import Store, open_store
from .stores.backend import RunHead, Submission
from .watching import Update, follow, settlements

# --------------------------------------------------------------------------- opening


def open_existing_store(url: str) -> Store:
    """Open the store at ``url``; a SQLite file or store directory that does not exist raises
    ``StoreUnavailable`` instead of being created empty (a typo must not look like "no runs")."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme in ("sqlite", "file") and parts.netloc in ("", "localhost") and "://" in url:
        path = parts.path[1:] if scheme == "sqlite" and parts.path.startswith("/") else parts.path
        if path and not Path(path).exists():
            raise StoreUnavailable(
                f"no unbroken store at {path} ({url}){_absolute_path_hint(scheme, path)}; "
                "pass --store URL or set UNBROKEN_STORE to your runs' store"
            )
    return open_store(url)


def _absolute_path_hint(scheme: str, path: str) -> str:
    """For ``sqlite:///tmp/x.db`` (three slashes: the relative path tmp/x.db) when /tmp/x.db is
    there: the four-slash URL that names it."""
    if scheme != "sqlite" or Path(path).is_absolute() or not Path("/" + path).exists():
        return ""
    return f"; /{path} exists: an absolute path takes four slashes, sqlite:////{path}"


# --------------------------------------------------------------------------- queued runs


@dataclass(frozen=True)
class QueuedRun:
    """A run submitted for workers that none has started yet: it has no save point."""

    run_id: str
    task: str
    agent: str | None
    submitted_at: float
    lost: bool = False
    """Parked as lost (``unbroken.lost``): a worker found its data gone; no worker takes it."""

    @property
    def phase(self) -> str:
        """``queued``, or ``data_lost`` for a parked run."""
        return lost.LOST_PHASE if self.lost else "queued"


def _queued(store: Store, item: Submission) -> QueuedRun:
    """The submission as a queued run, parked or not (one head read)."""
    return _as_queued(item, store.head_of(item.run_id))


def _as_queued(item: Submission, head: RunHead | None) -> QueuedRun:
    return QueuedRun(item.run_id, item.task, item.agent, item.submitted_at, lost.is_parked(head))


def queued_runs(store: Store) -> list[QueuedRun]:
    """Runs submitted (``store.submit``) and not started yet, oldest first; [] on a store
    that cannot queue runs."""
    if "claim" not in store.capabilities:
        return []
    queued = [_queued(store, item) for item in store.queued_runs() if not store.exists(item.run_id)]
    return sorted(queued, key=lambda run: run.submitted_at)


def queued_run(store: Store, run_id: str) -> QueuedRun | None:
    """The run ``run_id`` if it is queued and not started, else None (one submission read)."""
    check_run_id(run_id)
    if "claim" not in store.capabilities:
        return None
    item = store.queued(run_id)
    if item is None or store.exists(run_id):
        return None
    return _queued(store, item)


@dataclass(frozen=True)
class QueuedPage:
    """Queued runs not started yet, oldest first; ``next``: the cursor of the next page."""

    runs: list[QueuedRun]
    next: tuple[float, str] | None


def queued_page(store: Store, *, limit: int = 50, after: tuple[float, str] | None = None) -> QueuedPage:
    """Up to ``limit`` queued runs not started yet, oldest first, after the cursor ``after``:
    one ``store.unstarted_runs_and_heads`` read (about ``limit`` rows on SQLite, PostgreSQL and
    Redis, then each run's head: is it parked as lost?; on S3 a LIST and two GETs per run, the
    heads being those that chose the page), however long the queue. [] on a store that cannot
    queue runs."""
    if "claim" not in store.capabilities:
        return QueuedPage([], None)
    items = store.unstarted_runs_and_heads(after, limit + 1)
    runs = [_as_queued(item, head) for item, head in items[:limit]]
    more = len(items) > limit and runs
    return QueuedPage(runs, (runs[-1].submitted_at, runs[-1].run_id) if more else None)


RUNS_PAGE = 50
"""Runs ``unbroken runs`` lists by default (the most recently updated ones)."""


@dataclass(frozen=True)
class RunsPage:
    """One page of ``runs_page``: started runs newest first, then (first page only) the queued
    ones. ``next``: the cursor of the next page ((updated_at, run_id) of the last row), None at
    the end."""

    runs: list[RunSummary]
    queued: list[QueuedRun]
    next: tuple[float, str] | None
    queued_next: tuple[float, str] | None = None
    """More queued runs after ``queued`` (``queued_page(after=queued_next)``); None: no more."""

    @property
    def rows(self) -> list[RunSummary | QueuedRun]:
        return [*self.runs, *self.queued]


def runs_page(store: Store, *, limit: int = RUNS_PAGE, after: tuple[float, str] | None = None) -> RunsPage:
    """Up to ``limit`` started runs, most recently updated first (ties: run id descending),
    strictly after the cursor ``after`` (``RunsPage.next`` of the previous page), and, on the
    first page, up to ``limit`` of the oldest queued runs (``queued_page``). One
    ``store.runs_page(after, limit + 1)`` call: about ``limit`` rows on a store with an
    index on the update time (Postgres, Redis); a scan of every run's summary keeping the top
    ``limit`` on the others (SQLite, files, S3, memory: docs/stores.md)."""
    if limit < 1:
        raise ConfigError(f"a page of runs holds at least 1 run, not {limit}")
    rows = store.runs_page(after, limit + 1)
    more = len(rows) > limit
    rows = [_marked(store, row) for row in rows[:limit]]
    last = (rows[-1].updated_at, rows[-1].run_id) if more and rows else None
    if after is not None:
        return RunsPage(rows, [], last)
    queued = queued_page(store, limit=limit)
    return RunsPage(rows, queued.runs, last, queued.next)


def _marked(store: Store, row: RunSummary) -> RunSummary:
    """The row with the phase ``data_lost`` when the run is parked as lost (a head read for a
    run not finished, the only kind a worker parks)."""
    if row.phase in TERMINAL_PHASES or not lost.is_parked(store.head_of(row.run_id)):
        return row
    return replace(row, phase=lost.LOST_PHASE)


def iter_runs(store: Store, *, page: int = 500) -> Iterator[RunsPage]:
    """Every run, a page of ``page`` summaries at a time (``runs_page`` pages, keyset), then the
    queued runs a page at a time (``queued_page``): memory holds one page.
    A run saved while listed moves ahead of the cursor and is not listed again."""
    after: tuple[float, str] | None = None
    while True:
        current = runs_page(store, limit=page, after=after)
        yield RunsPage(current.runs, [], current.next)
        if current.next is None:
            break
        after = current.next
    queued_after: tuple[float, str] | None = None
    while True:  # then the queued runs, oldest first, a page at a time too
        queued = queued_page(store, limit=page, after=queued_after)
        if queued.runs:
            yield RunsPage([], queued.runs, None)
        if queued.next is None:
            return
        queued_after = queued.next


def list_all_runs(store: Store) -> list[RunSummary | QueuedRun]:
    """Every run: the started ones, most recently updated first, then the queued ones. Reads
    every run's summary at once (``store.list_runs``: one consistent read, all in memory); a
    listing that must stay bounded reads ``runs_page`` (one page) or ``iter_runs`` (a page at a
    time, as ``unbroken runs --all`` does)."""
    started: list[RunSummary | QueuedRun] = list(store.list_runs())
    seen = {run.run_id for run in started}
    return started + [run for run in queued_runs(store) if run.run_id not in seen]


# --------------------------------------------------------------------------- one run


@dataclass
class RunView:
    """What ``inspect_run`` found. A queued run has ``queued`` set and no ``state``."""

    run_id: str
    state: RunState | None = None
    queued: QueuedRun | None = None
    problem: str | None = None
    """Set when the run is damaged: ``state`` is then its last intact save point."""
    timeline: list[SaveInfo] = field(default_factory=list)
    lease: Lease | None = None
    lease_holder_dead: bool = False
    lost: bool = False
    """Parked as lost (``unbroken.lost``): a worker found its data gone; no worker takes it."""
    """The lease is held by a process on this machine that is gone: the next resume takes over at once."""
    ledger: list[LedgerEntry] = field(default_factory=list)
    """The effect ledger, oldest first: every entry, or the newest ``ledger`` of them."""
    ledger_earlier: bool = False
    """Older ledger entries exist than those in ``ledger`` (it is a page)."""
    call_entries: dict[str, LedgerEntry] = field(default_factory=dict)
    """The ledger entries of the state's pending calls, by idempotency key (absent: no entry)."""


def inspect_run(
    store: Store, run_id: str, *, decoded: Decoded | None = None, messages: int = 100, ledger: int | None = None
) -> RunView:
    """The run as stored (a damaged run: its last intact save point, with ``problem``), its
    lease and its effect ledger; a queued run as ``queued``. Raises ``RunNotFound`` otherwise.

    Reads the run's tail (``paging.read_tail``): its newest snapshot record, the deltas after it
    and the records holding its last ``messages`` messages; ``state.messages`` holds None before
    those, and ``timeline`` holds the save points read (the newest ones). Damage in what it reads
    falls back to the whole-run ``store.decode(run_id, recover=True)``; damage in older records is
    reported by the readers that read them (``export_run``, ``unbroken history --all``,
    ``store.load``). ``decoded``: the run already read (whole or by ``paging.read_tail``).
    ``ledger``: only the newest ``ledger`` entries of the effect ledger (``store.ledger_page``;
    None: every entry), plus the entries of the pending calls (``call_entries``, one read each)."""
    try:
        decoded = decoded or paging.read_tail(store, run_id, messages=messages, recover=True)
    except RunNotFound:
        queued = queued_run(store, run_id)
        if queued is None:
            raise
        return RunView(run_id, queued=queued, lost=queued.lost)
    lease = store.lease_of(run_id)
    keys = [call.idempotency_key for call in decoded.state.pending_calls]
    if ledger is None:
        entries, earlier = store.ledger_list(run_id), False
        by_key = {entry.key: entry for entry in entries}
        calls = {key: by_key[key] for key in keys if key in by_key}
    else:
        page = store.ledger_page(run_id, limit=ledger + 1) if ledger > 0 else []
        entries, earlier = page[:ledger][::-1], len(page) > ledger
        found = ((key, store.ledger_get(run_id, key)) for key in keys)
        calls = {key: entry for key, entry in found if entry is not None}
    return RunView(
        run_id,
        state=decoded.state,
        problem=decoded.problem,
        timeline=paging.tail_timeline(decoded),
        lease=lease,
        lease_holder_dead=lease is not None and owner_is_dead(lease.owner),
        lost=lease is not None and lease.owner == lost.LOST_OWNER,
        ledger=entries,
        ledger_earlier=earlier,
        call_entries=calls,
    )


LEDGER_PAGE = 100
"""Ledger entries ``unbroken effects`` and the inspector's run page show at first (the newest)."""


@dataclass(frozen=True)
class LedgerView:
    """A run's effect ledger, oldest first. ``run_finished``: the run has ended, so
    ``Store.ledger_gc`` may have collected its entries (an empty ledger then does not mean "no
    side effect yet"). ``earlier``: older entries exist than those in ``entries`` (a page)."""

    run_id: str
    entries: list[LedgerEntry]
    run_finished: bool
    earlier: bool = False


def ledger_of(store: Store, run_id: str, *, last: int | None = None) -> LedgerView:
    """The run's effect ledger (``last``: only its newest ``last`` entries, read with
    ``store.ledger_page``: bounded on SQLite and Postgres); ``RunNotFound`` when there is neither
    a run nor an entry. Whether the run has finished is read from its tail (``paging.read_tail``)."""
    if last is None:
        entries, earlier = store.ledger_list(run_id), False
    else:
        page = store.ledger_page(run_id, limit=last + 1) if last > 0 else []
        entries, earlier = page[:last][::-1], len(page) > last
    try:
        phase: str | None = paging.read_tail(store, run_id, recover=True).state.phase
    except (RunNotFound, CorruptCheckpoint):  # never saved (queued or absent), or every record lost
        phase = None
    if not entries and phase is None and not store.exists(run_id):
        raise RunNotFound(f"no run {run_id!r} in {store.url}")
    return LedgerView(run_id, entries, phase in TERMINAL_PHASES, earlier)


def ledger_before(store: Store, run_id: str, before: tuple[float, str], limit: int = LEDGER_PAGE) -> list[LedgerEntry]:
    """The ``limit`` entries just older than the cursor ``before`` ((created_at, key) of the
    oldest entry shown), oldest first: the "earlier" page of ``ledger_of(last=...)``."""
    return store.ledger_page(run_id, before=before, limit=limit)[::-1]


def export_run(store: Store, run_id: str) -> dict[str, JSONValue]:
    """The run as one JSON document: its fields, every message, its save points and its effect
    ledger (``damaged`` says what is wrong with a damaged run, exported up to its last intact
    save point). Reads only. Holds the whole history in memory (``store.decode``): to write it
    out, ``export_run_to`` streams the same bytes in constant memory."""
    return paging.export_document(store, run_id)


def export_run_to(store: Store, run_id: str, write: Callable[[str], object]) -> str | None:
    """Write ``export_run``'s document (``json.dumps(document, ensure_ascii=False, indent=2)``,
    byte for byte) through ``write`` as it is read, a page of records at a time (constant memory;
    see ``paging.stream_export``). Returns the document's ``damaged`` (None when intact)."""
    return paging.stream_export(store, run_id, write)


# --------------------------------------------------------------------------- migrate

Verdict = Literal["current", "migrate", "blocked"]


@dataclass(frozen=True)
class MigrationPlan:
    """What migrating one run would do. ``verdict``: ``current`` (nothing to do), ``migrate``
    or ``blocked`` (this unbroken cannot migrate it; ``action`` says why)."""

    run_id: str
    version: int | None
    action: str
    verdict: Verdict


def plan_migration(store: Store, run_id: str) -> MigrationPlan:
    """Read the schema version of the run's first record and say what ``migrate_run`` would do."""
    try:
        records = store.read_records(run_id)
    except RunNotFound:
        return MigrationPlan(run_id, None, "no save point yet (queued, not started)", "current")
    version = peek_version(records[0])
    current = MIGRATIONS.current
    if version is None:
        return MigrationPlan(
            run_id, None, "cannot read its first save record; `unbroken show` reports the damage", "blocked"
        )
    if version == current:
        return MigrationPlan(run_id, version, "up to date", "current")
    if version < current and reads_natively(version):
        # Only the layout changed since (docs/format.md): read as it is, never rewritten for it.
        return MigrationPlan(run_id, version, f"up to date (schema {version} is read as it is)", "current")
    if version > current:
        reason = f"written by a newer unbroken (schema {version} > {current}); upgrade unbroken"
        return MigrationPlan(run_id, version, reason, "blocked")
    try:
        store.decode(run_id)
    except (IncompatibleSchema, CorruptCheckpoint) as exc:
        return MigrationPlan(run_id, version, f"cannot migrate: {exc}", "blocked")
    return MigrationPlan(
        run_id, version, f"rewrite {len(records)} save record(s) as one snapshot at schema {current}", "migrate"
    )


def migrate_run(store: Store, run_id: str) -> int:
    """Rewrite the run's records as one snapshot at the current schema, atomically, under its
    lease (``LeaseHeld`` while a live process runs it). Returns the version it migrated from."""
    plan = plan_migration(store, run_id)
    if plan.verdict != "migrate" or plan.version is None:
        raise IncompatibleSchema(f"run {run_id!r}: {plan.action}")
    lease = acquire(store, run_id, make_owner(), 30.0)
    try:
        head = store.read_records(run_id)[-1].seq
        state = store.decode(run_id).state  # folds and migrates in memory
        state.save_seq = head + 1
        state.updated_at = clock.wall()
        reason = f"migrated from schema {plan.version}"
        store.rewrite(run_id, [encode_full(state, reason)], expect_seq=head, fence=lease.fence)
    finally:
        store.release_lease(lease)
    return plan.version


# --------------------------------------------------------------------------- recovery (stores engineer)


@dataclass(frozen=True)
class Recovery:
    """What ``recover`` did: the save point the run continues from (as the new save ``seq``),
    the run id holding the original records, and the ledger keys the model was told about."""

    run_id: str
    recovered_from: int
    seq: int
    kept_aside: str
    told: list[str]
    released: bool = False
    """The run was parked as lost and is released (``lost.release``): nothing else was changed."""


def recover(store: Store, run_id: str, *, to: int | None = None) -> Recovery:
    """Continue a damaged run from an intact save point, as an explicit operator act.

    The run's records, damaged ones included, are first copied unchanged to the run
    ``<run_id>.damaged-<seq>`` (nothing is deleted); the ledger is kept as it is. The run then
    holds one snapshot of save point ``to`` (default: the last intact save point with no call in
    flight), plus a user message naming every side effect the ledger recorded after that point,
    so the model does not do them again. Refused (``LeaseHeld``) while a live process holds the run,
    and (``ConfigError``, nothing changed) when its records are intact: recovering twice is safe.

    A run parked as lost (``unbroken.lost``) is released instead, and nothing else is changed:
    workers take it again, from the save point the store still has (``seq``), or from its task
    when it has none (which may repeat side effects the lost data recorded)."""
    from .codec import EncodedSave, decode, summary_of

    if lost.is_parked(store.head_of(run_id)):
        freed = lost.release(store, run_id)
        return Recovery(run_id, freed.seq, freed.seq, "", [], released=True)
    records = store.read_records(run_id)
    decoded = store.decode(run_id, recover=True)
    if decoded.problem is None:
        # A healthy run is never rewritten here: its calls in flight are settled by a resume.
        raise ConfigError(
            f"the save records of run {run_id!r} are intact (not damaged): nothing to recover, nothing was "
            f"changed. To go back to an earlier save point on purpose, use `unbroken rewind {run_id} --to SAVE`; "
            "a damaged effect-ledger entry (named by `unbroken effects`) must be restored from a backup."
        )
    intact = decoded.last_seq
    candidates = [to] if to is not None else [r.seq for r in reversed(records) if r.seq <= intact]
    state: RunState | None = None
    for seq in candidates:
        if seq > intact or not any(r.seq == seq for r in records):
            raise CorruptCheckpoint(
                f"save point {seq} of run {run_id!r} is not intact; the last intact one is {intact}"
            )
        state = decode(run_id, [r for r in records if r.seq <= seq]).state
        if not state.pending_calls:
            break
        if to is not None:
            raise CorruptCheckpoint(f"save point {seq} of run {run_id!r} has calls in flight; pick another with --to")
    if state is None or state.pending_calls:
        raise CorruptCheckpoint(f"run {run_id!r} has no intact save point without calls in flight to recover to")
    lease = acquire(store, run_id, make_owner(), 60.0)
    try:
        head = max(records[-1].seq, (store.head_of(run_id) or records[-1]).seq)
        aside = f"{run_id}.damaged-{head}"
        summary = replace(summary_of(state), run_id=aside, phase="damaged")
        kept = []
        for n, record in enumerate(records, 1):
            body = record.body if isinstance(record.body, str) else record.body.decode("utf-8", "replace")
            label = f"kept aside: save {record.seq} of {run_id}"
            kept.append(EncodedSave(aside, n, label, body, record.checksum, False, summary, ()))
        if not store.exists(aside):
            store.rewrite(aside, kept, expect_seq=0)
        recovered_from = state.save_seq
        state.history_checked = 0  # the recovered run's next resume checks its whole history
        recorded, compacted_at = _recorded_calls([r for r in records if r.seq <= recovered_from])
        after = [
            e
            for e in store.ledger_list(run_id)
            if e.key not in recorded and (compacted_at is None or e.created_at >= compacted_at)
        ]
        if after:
            lines = [f"- {e.tool} (call {e.call_id}): {_effect_line(e)}" for e in after]
            state.messages.append(
                {
                    "role": "user",
                    "content": f"[unbroken] This run was restored to save point {recovered_from} after its storage "
                    "was damaged. These tool calls were already made after that point; do not repeat them:\n"
                    + "\n".join(lines),
                }
            )
        state.save_seq = head + 1
        state.updated_at = clock.wall()
        store.rewrite(
            run_id, [encode_full(state, f"recovered from save {recovered_from}")], expect_seq=head, fence=lease.fence
        )
    finally:
        store.release_lease(lease)
    return Recovery(run_id, recovered_from, state.save_seq, aside, [e.key for e in after])


def _recorded_calls(records: Sequence[StoredRecord]) -> tuple[set[str], float | None]:
    """The idempotency keys of every call the records name (a call is recorded, with its key, in
    the save that first holds it, before its ledger entry is made), and, when the records start
    at a compaction snapshot rather than at save 1, that snapshot's time: calls made before it
    are no longer named in any record, so they are told apart by time alone (they were all
    answered before the compaction, which happens only between turns)."""
    from .codec import fold_fields, loads

    keys: set[str] = set()
    compacted_at: float | None = None
    folded: dict[str, JSONValue] | None = None
    for record in records:
        body = loads(record.body)
        # Folded, so that a format v2 record's pending calls come with their keys (the records are
        # the intact ones before the damage: they fold).
        folded = fold_fields(folded, body) if isinstance(body, dict) else folded
        fields = folded or {}
        if record is records[0] and record.seq > 1:
            compacted_at = float(fields.get("updated_at", 0.0))
        keys.update(str(call.get("idempotency_key")) for call in fields.get("pending_calls") or [])
        keys.update(fields.get("results") or {})
        keys.update(fields.get("resolutions") or {})
    return keys, compacted_at


def _effect_line(entry: LedgerEntry) -> str:
    if entry.result is None:
        return f"{entry.status}, outcome not recorded (it may have taken effect)"
    return f"{entry.status}: {str(entry.result.content)[:200]}"


def approve(
    store: Store, run_id: str, call_id: str, *, digest: str | None = None, by: str | None = None
) -> ApprovalRequest:
    """Approve the open request of ``run_id`` for ``call_id`` (provider call id or idempotency
    key); with ``digest``, only if the call's arguments are the ones shown. Durable when it
    returns; the resumed run executes the call exactly once."""
    return decide(store, run_id, call_id, approved=True, digest=digest, by=by)


def deny(
    store: Store, run_id: str, call_id: str, *, reason: str, digest: str | None = None, by: str | None = None
) -> ApprovalRequest:
    """Deny the open request of ``run_id`` for ``call_id``: the resumed run gives the model an
    ``is_error`` result with ``reason`` and never executes the call. Durable when it returns."""
    return decide(store, run_id, call_id, approved=False, reason=reason, digest=digest, by=by)


__all__ = [
    "ApprovalRequest",
    "Fork",
    "KeyRotation",
    "RotationCursor",
    "LedgerView",
    "MigrationPlan",
    "Recovery",
    "QueuedRun",
    "RunView",
    "RunsPage",
    "Update",
    "approve",
    "deny",
    "export_run",
    "export_run_to",
    "follow",
    "fork",
    "import_run",
    "inspect_run",
    "iter_runs",
    "ledger_before",
    "ledger_of",
    "rotate_all",
    "rotate_keys",
    "list_all_runs",
    "migrate_run",
    "open_existing_store",
    "pending_approvals",
    "plan_migration",
    "DAY",
    "Erasure",
    "Retention",
    "RetentionReport",
    "apply_retention",
    "erase",
    "queued_page",
    "queued_run",
    "queued_runs",
    "recover",
    "resolve_call",
    "rewind",
    "runs_page",
    "settlements",
]
