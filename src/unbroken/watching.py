"""Following a run from another process, and reading back what its save points say about crashes.

``wait_until_started(store, run_id)`` waits for a run that is not there yet (``watch --wait``).
``follow(store, run_id)`` is an observer: it never takes the lease (a process that cannot get
the lease, because a live worker holds it, can still watch). It reads the run once, then
polls the run's head and reads only the records written since, yielding one ``Update`` per
change, until the run finishes or stops for a person (paused, awaiting approval).

``settlements(store, run_id)`` says, per save point, where a run was resumed after a crash (or a
stop) and how each call left without a result was settled: the lines ``unbroken history``
shows.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from . import clock, paging
from .codec import Decoded, fold_fields, save_info
from .errors import CorruptCheckpoint, RunNotFound
from .state import TERMINAL_PHASES, LedgerEntry, SaveInfo, check_run_id
from .stores.base import Store

STOPPED_PHASES = TERMINAL_PHASES | {"paused", "awaiting_approval"}
"""Phases in which a run waits for nothing but a person (or is over): ``follow`` ends there."""


@dataclass(frozen=True)
class Update:
    """What changed since the last update: new save points (oldest first), the lease holder
    (None: nobody holds the run), and the ledger entries that are new or changed."""

    run_id: str
    saves: list[SaveInfo]
    phase: str
    holder: str | None
    effects: list[LedgerEntry] = field(default_factory=list)
    calls: dict[int, list[str]] = field(default_factory=dict)
    """By save point: the tools of the calls the model asked for there (the turn's calls)."""

    @property
    def stopped(self) -> bool:
        return self.phase in STOPPED_PHASES


def wait_until_started(
    store: Store,
    run_id: str,
    *,
    timeout: float,
    interval: float = 0.5,
    sleep: Callable[[float], None] = clock.sleep,
) -> None:
    """Return once ``run_id`` has its first save point (a queued run is waited for too); raise
    ``RunNotFound`` if it has none after ``timeout`` seconds. Reads only its head."""
    check_run_id(run_id)
    deadline = clock.monotonic() + timeout
    while True:
        head = store.read_head(run_id)
        if head is not None and head.seq > 0:
            return
        if clock.monotonic() >= deadline:
            raise RunNotFound(f"no run {run_id!r} in {store.url} after waiting {timeout:g}s")
        sleep(interval)


def proposed_calls(
    run_id: str, records: Sequence[dict[str, Any]], fields: dict[str, Any] | None = None
) -> dict[int, list[str]]:
    """By save point: the tools of the calls that first appear pending there, folding ``records``
    (parsed, in order) from ``fields`` (the small fields before them; None: none known, so a
    page that starts with a delta still names its calls' keys by ``run_id``)."""
    calls: dict[int, list[str]] = {}
    fields = fields if fields is not None else {"run_id": run_id}
    for body in records:
        before = _calls_of(fields)
        fields = fold_fields(fields, body)
        names = [str(call["name"]) for key, call in _calls_of(fields).items() if key not in before]
        if names:
            calls[body["seq"]] = names
    return calls


def follow(
    store: Store,
    run_id: str,
    *,
    interval: float = 0.5,
    timeout: float | None = None,
    until_stopped: bool = True,
    sleep: Callable[[float], None] = clock.sleep,
    history: int | None = 50,
) -> Iterator[Update]:
    """Yield the run's last ``history`` save points (None: every one), then one ``Update`` per
    change, polling every ``interval`` seconds; end when the run finishes or stops for a person
    (``until_stopped``), or after ``timeout`` seconds. Reads only.

    It starts from the run's tail (``paging.read_tail``: the newest snapshot and the saves after
    it) and the last ``history`` save points (``paging.timeline_page``), whatever the run's
    length, then reads only the records written since (``records_after``). The first update's
    ``effects`` is the whole ledger (``ledger_list``): later ones name what changed."""
    check_run_id(run_id)
    decoded = paging.read_tail(store, run_id, recover=True)
    fields: dict[str, Any] = dict(decoded.state.small_fields())
    effects = store.ledger_list(run_id)
    seen = {(entry.key, entry.status) for entry in effects}
    last_seq = decoded.last_seq
    if history is None:
        whole = store.decode(run_id, recover=True)
        saves = [info for info in whole.timeline if info.seq <= last_seq]
        calls = proposed_calls(run_id, whole.records)
    else:
        page = paging.timeline_page(store, run_id, last_seq - history + 1, last_seq) if history > 0 else None
        saves, calls = (page.saves, proposed_calls(run_id, page.records)) if page is not None else ([], {})
    first = Update(run_id, saves, decoded.state.phase, _holder(store, run_id), effects, calls)
    yield first
    if until_stopped and first.stopped:
        return
    deadline = None if timeout is None else clock.monotonic() + timeout
    while deadline is None or clock.monotonic() < deadline:
        sleep(interval)
        head = store.read_head(run_id)
        if head is None:
            raise RunNotFound(f"run {run_id!r} was deleted while it was watched")
        if head.seq <= last_seq:
            continue
        saves, calls = [], {}
        for record in store.records_after(run_id, last_seq):
            try:  # checked like every other read (size, CRC, shape): a damaged record is never shown
                body = paging.parse_record(record.seq, record.body, record.checksum, same_schema=False)
            except paging.Unusual as exc:
                raise CorruptCheckpoint(
                    f"run {run_id!r} changed under watch into something only a whole read can judge ({exc}); "
                    f"nothing was changed: `unbroken history {run_id} --all` says what is wrong",
                    last_good_seq=last_seq,
                ) from None
            calls.update(proposed_calls(run_id, [body], fields))
            fields = fold_fields(fields, body)  # snapshot replaces, delta updates (format v2 completed)
            saves.append(save_info(body, fields))
            last_seq = record.seq
        effects = [entry for entry in store.ledger_list(run_id) if (entry.key, entry.status) not in seen]
        seen.update((entry.key, entry.status) for entry in effects)
        update = Update(run_id, saves, str(fields.get("phase", "?")), _holder(store, run_id), effects, calls)
        yield update
        if until_stopped and update.stopped:
            return


def _holder(store: Store, run_id: str) -> str | None:
    lease = store.lease_of(run_id)
    return lease.owner if lease is not None else None


# --------------------------------------------------------------------------- crashes in the history

_SETTLED_WITHOUT_RUNNING = {
    "reused": "settled from the effect ledger (it had run; not run again)",
    "probed": "settled by its probe (it had taken effect; not run again)",
    "unknown": "outcome UNKNOWN (reported, not run again)",
    "skipped": "not run again (past max_attempts)",
    "attempts_exhausted": "not run again (past max_attempts)",
    "resolved": "settled by hand (unbroken resolve)",
    "denied": "denied by a person (not run)",
    "invalid": "refused (malformed call; not run)",
}


def settlements(
    store: Store, run_id: str, *, decoded: Decoded | None = None, records: Sequence[dict[str, Any]] | None = None
) -> dict[int, list[str]]:
    """Notes by save point: where the run resumed with calls left without a result (a crash,
    or a stop) and how each such call was settled. Reads only. ``decoded``: the run already
    read with ``store.decode(run_id, recover=True)`` (read once, not twice). ``records``: only
    these parsed records, a snapshot first (a page of the history, ``unbroken.paging``): a call
    left open at a resume before them is not followed into them."""
    if records is None:
        records = (decoded or store.decode(check_run_id(run_id), recover=True)).records
    ledger = {entry.key: entry for entry in store.ledger_list(run_id)}
    notes: dict[int, list[str]] = {}
    fields: dict[str, Any] = {}
    resumed: dict[str, dict[str, Any]] = {}  # key -> call, for calls open at a resume, until settled
    for body in records:
        previous = fields
        fields = fold_fields(fields, body)  # pending calls in full, whatever the record's version
        seq, label = body["seq"], body["label"]
        calls = {**_calls_of(previous), **_calls_of(fields)}
        results = fields.get("results") or {}
        lines: list[str] = []
        if label in ("attempt", "repaired"):
            fresh = [key for key in _calls_of(fields) if key not in results and key not in resumed]
            if fresh:
                what = "a crash or a stop" if label == "attempt" else "a repair of the history"
                lines.append(f"resumed after {what}: {len(fresh)} call(s) had no result")
                resumed.update((key, calls[key]) for key in fresh)
        before = previous.get("results") or {}
        for key in [key for key in resumed if key in results and key not in before]:
            lines.append(_settled_line(resumed.pop(key), str(results[key].get("how", "executed")), ledger.get(key)))
        if not fields.get("pending_calls"):  # the turn's last results went into the history
            approvals = previous.get("approvals") or {}
            for key, call in resumed.items():
                denied = (approvals.get(key) or {}).get("status") == "denied"
                entry = ledger.get(key)
                how = "denied" if denied else entry.result.how if entry is not None and entry.result else "executed"
                lines.append(_settled_line(call, how, entry))
            resumed = {}
        if lines:
            notes[seq] = lines
    return notes


def _calls_of(fields: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {call["idempotency_key"]: call for call in fields.get("pending_calls") or []}


def _settled_line(call: dict[str, Any], how: str, entry: LedgerEntry | None) -> str:
    text = _SETTLED_WITHOUT_RUNNING.get(how)
    if text is None and how == "executed":
        if entry is None:
            text = "run again (read-only, or never claimed)"
        elif entry.attempts > 1:
            text = f"run again with the same idempotency key (attempt {entry.attempts})"
        else:
            text = "run now (it had not started before)"
    return f"call {call['id']} ({call['name']}): {text or how}"
