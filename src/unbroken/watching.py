"""Following a run from another process, and reading back what its save points say about crashes.

``wait_until_started(store, run_id)`` waits for a run that is not there yet (``watch --wait``).
``follow(store, run_id)`` is an observer: it never takes the lease (a process that cannot get
the lease, because a live worker holds it, can still watch). It reads the run once, then
polls the run's head and reads only the records written since, yielding one ``Update`` per
change, until the run finishes or stops for a person (paused, awaiting approval).

``settlements(store, run_id)`` says, per save point, what each resume found and how each call
was settled, as the engine recorded it in that save point (``Settlement``, ``Resumption``):
the lines ``unbroken history``, ``watch`` and the inspector show. It reads; it never guesses.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from . import clock, paging
from .acceptance import RunRecords
from .codec import Decoded, fold_fields, save_info
from .errors import CorruptCheckpoint, RunNotFound
from .state import TERMINAL_PHASES, LedgerEntry, Resumption, SaveInfo, Settlement
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
    notes: dict[int, list[str]] = field(default_factory=dict)
    """What the new save points record about resumes and settled calls, in words, by seq."""
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
    deadline = clock.monotonic() + timeout
    while True:
        head = store.head_of(run_id)
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
        before = _pending_by_key(fields)
        fields = fold_fields(fields, body)
        names = [str(call["name"]) for key, call in _pending_by_key(fields).items() if key not in before]
        if names:
            calls[body["seq"]] = names
    return calls


def _pending_by_key(fields: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {call["idempotency_key"]: call for call in fields.get("pending_calls") or []}


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
    decoded = paging.read_tail(store, run_id, recover=True)
    fields: dict[str, Any] = dict(decoded.state.small_fields())
    effects = store.ledger_list(run_id)
    seen = {(entry.key, entry.status) for entry in effects}
    last_seq = decoded.last_seq
    notes: dict[int, list[str]] = {}
    calls: dict[int, list[str]] = {}
    if history is None:
        whole = store.decode(run_id, recover=True)
        saves = [info for info in whole.timeline if info.seq <= last_seq]
        notes = settlements(store, run_id, records=[r for r in whole.records if int(r["seq"]) <= last_seq])
        calls = proposed_calls(run_id, whole.records)
    elif history > 0:
        page = paging.timeline_page(store, run_id, last_seq - history + 1, last_seq)
        saves = page.saves
        shown = {info.seq for info in saves}
        notes = {seq: lines for seq, lines in settlements(store, run_id, records=page.records).items() if seq in shown}
        calls = proposed_calls(run_id, page.records)
    else:
        saves = []
    first = Update(run_id, saves, decoded.state.phase, _holder(store, run_id), effects, notes, calls)
    yield first
    if until_stopped and first.stopped:
        return
    deadline = None if timeout is None else clock.monotonic() + timeout
    run = RunRecords(run_id)  # the records since, in seq order: each bound to the run
    while deadline is None or clock.monotonic() < deadline:
        sleep(interval)
        head = store.head_of(run_id)
        if head is None:
            raise RunNotFound(f"run {run_id!r} was deleted while it was watched")
        if head.seq <= last_seq:
            continue
        saves, notes, calls = [], {}, {}
        for record in store.records_since(run_id, last_seq):
            try:  # checked like every other read (size, CRC, shape): a damaged record is never shown
                body = paging.parse_record(run, record.seq, record.body, record.checksum, same_schema=False)
            except paging.Unusual as exc:
                raise CorruptCheckpoint(
                    f"run {run_id!r} changed under watch into something only a whole read can judge ({exc}); "
                    f"nothing was changed: `unbroken history {run_id} --all` says what is wrong",
                    last_good_seq=last_seq,
                ) from None
            calls.update(proposed_calls(run_id, [body], fields))
            fields = fold_fields(fields, body)  # snapshot replaces, delta updates (format v2 completed)
            saves.append(save_info(body, fields))
            lines = account_lines(body)
            if lines:
                notes[record.seq] = lines
            last_seq = record.seq
        effects = [entry for entry in store.ledger_list(run_id) if (entry.key, entry.status) not in seen]
        seen.update((entry.key, entry.status) for entry in effects)
        update = Update(run_id, saves, str(fields.get("phase", "?")), _holder(store, run_id), effects, notes, calls)
        yield update
        if until_stopped and update.stopped:
            return


def _holder(store: Store, run_id: str) -> str | None:
    lease = store.lease_of(run_id)
    return lease.owner if lease is not None else None


# --------------------------------------------------------------------------- the account of each call


def settlements(
    store: Store, run_id: str, *, decoded: Decoded | None = None, records: Sequence[dict[str, Any]] | None = None
) -> dict[int, list[str]]:
    """Notes by save point: what each resume found and how each call was settled, in words, as
    the engine recorded them in the save that settled it (``account_lines``); nothing is
    reconstructed. Reads only. ``decoded``: the run already read with ``store.decode(run_id,
    recover=True)`` (read once, not twice). ``records``: only these parsed records (a page of
    the history, ``unbroken.paging``)."""
    if records is None:
        records = (decoded or store.decode(run_id, recover=True)).records
    notes: dict[int, list[str]] = {}
    for record in records:
        lines = account_lines(record)
        if lines:
            notes[int(record["seq"])] = lines
    return notes


def account_lines(record: dict[str, Any]) -> list[str]:
    """The words for one parsed save record's account (``settled``, ``resumed``); a record
    without one (older, or with nothing to say) has none."""
    lines = []
    resumed = record.get("resumed")
    if isinstance(resumed, dict):
        lines.append(describe_resume(Resumption.from_json(resumed)))
    for item in record.get("settled") or ():
        if isinstance(item, dict):
            lines.append(describe(Settlement.from_json(item)))
    return lines


def resumes_in(records: Sequence[dict[str, Any]]) -> int:
    """How many of ``records`` are a resume's record."""
    return sum(1 for record in records if isinstance(record.get("resumed"), dict))


_PROBE_WORDS = {
    "found": "the probe found that it took effect",
    "not_executed": "the probe said it did not happen",
    "unknown": "the probe could not tell",
    "raised": "the probe raised an error",
    "none": "no probe",
}
_LEDGER_WORDS = {
    "pending": "it was started before and its outcome never recorded",
    "unknown": "its outcome had been reported unknown before",
    "succeeded": "the effect ledger holds its result (succeeded)",
    "failed": "the effect ledger holds its result (failed)",
}
_POLICY_WORDS = {
    "tell_model": "the model was told",
    "pause": "the run paused for `unbroken resolve`",
    "fail": "the run failed by policy",
}


def describe_resume(found: Resumption) -> str:
    """A resume's record in words: where the previous process left the run."""
    if found.by_hand:
        return (
            f"resumed after save {found.last_seq}: {found.by_hand} call(s) of the turn had been settled by hand "
            f"(unbroken resolve); {found.dangling} of {found.calls} call(s) had no result"
        )
    if found.phase == "running_tools" and not found.dangling:
        where = f"after each of the turn's {found.calls} call(s) had a result, before the turn was closed"
    elif found.phase == "running_tools":
        where = f"while settling tool calls: {found.dangling} of {found.calls} call(s) had no result"
    elif found.phase == "awaiting_model":
        where = "during a model call (or a compaction): no tool call was in flight"
    elif found.phase == "paused":
        where = f"paused for `unbroken resolve` ({found.dangling} call(s) without a result)"
    elif found.phase == "awaiting_approval":
        where = "waiting for an approval"
    else:
        where = f"in phase {found.phase}"
    return f"resumed after save {found.last_seq}: the previous process ended {where}"


def describe(settled: Settlement) -> str:
    """One call's settlement in words: what was found, what the probe said, what was done."""
    said = []
    if settled.ledger in _LEDGER_WORDS:
        said.append(_LEDGER_WORDS[settled.ledger])
    if settled.probe is not None:
        said.append(_PROBE_WORDS.get(settled.probe, settled.probe))
    if settled.grace:
        said.append(f"asked again after waiting {settled.grace:g} s for the previous holder to be unable to act")
    said.append(_decided(settled))
    return f"call {settled.call_id} ({settled.tool}): {'; '.join(said)}"


def _decided(settled: Settlement) -> str:
    outcome, reason = settled.outcome, settled.reason
    if outcome == "ran":
        if settled.attempt > 1:
            done = f"run again (attempt {settled.attempt})"
        elif settled.resumed:
            done = "it had not started: run now (attempt 1)"
        else:
            done = "run (attempt 1)"
        return f"{done}: {reason}" if reason else done
    if outcome == "reused":
        return "not run again: its recorded result was used"
    if outcome == "probed":
        return "not run again: the probe's result is its result"
    if outcome == "unknown":
        why = f" ({reason})" if reason and reason != "the tool has no probe" else ""
        return f"outcome UNKNOWN{why}; {_POLICY_WORDS.get(settled.policy or '', 'policy ' + str(settled.policy))}"
    if outcome == "resolved":
        return f"settled by hand: {reason}" if reason else "settled by hand (unbroken resolve)"
    return f"not run: {reason}" if reason else "not run"
