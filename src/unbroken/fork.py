"""Fork and rewind: a run that shares another's history up to a save point, then goes its own way.

``fork(store, run_id, at=SAVE, new_run_id=NEW)`` writes NEW as one snapshot of ``run_id`` at save
point SAVE (one atomic append). The calls the fork inherits are settled, never re-run: every
call answered up to SAVE is in the shared history; a call still open at SAVE that the original
went on to run is answered in the fork with the result in the original's effect ledger; a call
the original never started gets a new idempotency key of the fork's own (keys are global, so
the two runs can never claim each other's). A call whose outcome is in doubt in the original
(started, not settled) makes the fork refuse that save point. The effects the original
recorded *after* SAVE are returned (and listed by ``unbroken fork``) before the fork runs, so
nobody is surprised by a second email.

``rewind(store, run_id, to=SAVE)`` is a fork under the same id: the run as it is now is first
kept as the run ``<run_id>.branch-<head>`` (a fork at its last save point), then ``run_id`` is
replaced, atomically, by its state at SAVE. Save numbers go on from the old head, so the calls
of the new branch get new idempotency keys; its open calls are settled from its own ledger.

Approval decisions are bound to the run they were given in: a fork asks again. Both
operations are safe to repeat after a crash (a fork that already exists with the same origin
is returned as is).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from . import clock, crashpoints
from .codec import decode, encode_full, fold_fields
from .errors import ConfigError, CorruptCheckpoint
from .leases import acquire, make_owner
from .ledger import unknown_result
from .state import LedgerEntry, RunState, check_run_id
from .stores.base import Store


@dataclass(frozen=True)
class Fork:
    """What ``fork`` (or ``rewind``) made: ``run_id`` continues from save ``at`` of
    ``forked_from``. ``settled`` are the ledger entries copied into it (their calls are never
    re-run); ``effects_after`` are the side effects the original recorded after ``at``;
    ``kept_as`` is the run holding the old branch (``rewind`` only)."""

    run_id: str
    forked_from: str
    at: int
    settled: list[LedgerEntry]
    effects_after: list[LedgerEntry]
    kept_as: str | None = None


def fork(store: Store, run_id: str, *, at: int, new_run_id: str | None = None) -> Fork:
    """Write ``new_run_id`` (default ``<run_id>.fork-<at>``) as ``run_id`` at save point ``at``,
    in one atomic append. Reads ``run_id`` only. Durable when it returns; repeating it returns
    the same fork. ``ConfigError`` if a call open at ``at`` is in doubt in the original."""
    return _fork(store, run_id, at, new_run_id, in_doubt="refuse")


def _fork(store: Store, run_id: str, at: int, new_run_id: str | None, *, in_doubt: str) -> Fork:
    check_run_id(run_id)
    new_run_id = check_run_id(new_run_id if new_run_id is not None else f"{run_id}.fork-{at}")
    if new_run_id == run_id:
        raise ConfigError(f"a fork needs a new run id; to go back in place use rewind({run_id!r}, to={at})")
    label = f"forked from {run_id} at save {at}"
    state, keys = _state_at(store, run_id, at)
    settled, after = _split_ledger(store, run_id, state, keys)
    if store.exists(new_run_id):
        first = store.history(new_run_id)[0]
        if first.label != label:
            raise ConfigError(f"run {new_run_id!r} already exists; pick another id for the fork")
        return Fork(new_run_id, run_id, at, settled, after)
    _inherit_open_calls(store, run_id, new_run_id, state, in_doubt=in_doubt)
    state.run_id = new_run_id
    state.save_seq = 1
    state.updated_at = clock.wall()
    _ask_again(state)
    encoded = encode_full(state, label)
    crashpoints.hit("fork.before")
    store.append(encoded, expect_seq=0)
    crashpoints.hit("fork.after")
    return Fork(new_run_id, run_id, at, settled, after)


def rewind(store: Store, run_id: str, *, to: int) -> Fork:
    """Go back to save point ``to`` in place: the run as it is is kept as ``<run_id>.branch-<head>``
    (returned as ``kept_as``), then ``run_id`` holds its state at ``to``. Refused while a live
    process runs it (``LeaseHeld``). Durable when it returns."""
    lease = acquire(store, run_id, make_owner(), 60.0)
    try:
        head = store.history(run_id)[-1].seq
        if to >= head:
            raise ConfigError(f"run {run_id!r} is at save {head}; rewind to an earlier save point, not {to}")
        state, keys = _state_at(store, run_id, to)
        kept = _fork(store, run_id, head, f"{run_id}.branch-{head}", in_doubt="unknown")
        settled, after = _split_ledger(store, run_id, state, keys)
        state.save_seq = head + 1
        state.updated_at = clock.wall()
        _ask_again(state)
        encoded = encode_full(state, f"rewound to save {to}; the old branch is run {kept.run_id}")
        crashpoints.hit("rewind.before")
        store.rewrite(run_id, [encoded], expect_seq=head, fence=lease.fence)
        crashpoints.hit("rewind.after")
    finally:
        store.release_lease(lease)
    return Fork(run_id, run_id, to, settled, after, kept_as=kept.run_id)


def _state_at(store: Store, run_id: str, at: int) -> tuple[RunState, set[str]]:
    """The run's state at save point ``at`` and the idempotency keys of every call recorded up
    to it (from each save's pending calls and results)."""
    records = [record for record in store.read_records(run_id) if record.seq <= at]
    if not records or records[-1].seq != at:
        saves = store.history(run_id)
        raise ConfigError(
            f"run {run_id!r} has no save point {at}; its save points are {saves[0].seq}..{saves[-1].seq} "
            "(`unbroken history` lists them)"
        )
    try:
        decoded = decode(run_id, records)
    except CorruptCheckpoint as exc:
        raise CorruptCheckpoint(f"save point {at} of run {run_id!r} cannot be read: {exc}") from exc
    keys: set[str] = set()
    fields = None
    for record in decoded.records:
        fields = fold_fields(fields, record)  # the record's pending calls in full, whatever its version
        keys.update(call["idempotency_key"] for call in fields.get("pending_calls") or [])
        keys.update(fields.get("results") or {})
    # A new branch: its next resume checks the whole history for unanswered calls (format v2 marker).
    decoded.state.history_checked = 0
    return decoded.state, keys


def _split_ledger(
    store: Store, run_id: str, state: RunState, keys: set[str]
) -> tuple[list[LedgerEntry], list[LedgerEntry]]:
    """The run's ledger entries of calls up to the fork point (by key, or made before it), and
    the ones after it."""
    settled: list[LedgerEntry] = []
    after: list[LedgerEntry] = []
    for entry in store.ledger_list(run_id):
        (settled if entry.key in keys or entry.created_at <= state.updated_at else after).append(entry)
    return settled, after


def _inherit_open_calls(store: Store, run_id: str, new_run_id: str, state: RunState, *, in_doubt: str) -> None:
    """Settle, in the fork's state, each call open at the fork point: answered from the
    original's ledger if it ran there, re-keyed for the fork if it never started there."""
    rekeyed: dict[str, str] = {}
    for call in state.dangling_calls():
        entry = store.ledger_get(run_id, call.idempotency_key)
        if entry is None:
            rekeyed[call.idempotency_key] = _fork_key(new_run_id, call.idempotency_key)
        elif entry.status in ("succeeded", "failed") and entry.result is not None:
            state.results[call.idempotency_key] = entry.result.replace(call_id=call.id, how="reused")
        elif in_doubt == "unknown":
            state.results[call.idempotency_key] = unknown_result(
                call, f"run {run_id!r} started it and its outcome was not settled when this branch was kept"
            )
        else:
            raise ConfigError(
                f"call {call.id} ({call.name}) is open at that save point and its outcome is in doubt in run "
                f"{run_id!r}; settle it first (`unbroken resolve`) or fork at another save point"
            )
    for call in state.pending_calls:
        new_key = rekeyed.get(call.idempotency_key)
        if new_key is not None:
            state.resolutions.pop(call.idempotency_key, None)
            state.attempts.pop(call.idempotency_key, None)
            call.idempotency_key = new_key


def _fork_key(new_run_id: str, key: str) -> str:
    """The fork's own key for a call it inherits unstarted (stable: a repeated fork agrees)."""
    return "ub_" + hashlib.sha256(f"{new_run_id}\x00fork\x00{key}".encode()).hexdigest()[:40]


def _ask_again(state: RunState) -> None:
    """Drop approval requests and decisions: the engine's gate asks again before any call runs."""
    if state.approvals:
        state.approvals = {}
