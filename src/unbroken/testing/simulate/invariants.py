"""The invariants checked after every schedule, over the services' journals and the store.

Each returns the violations it found as sentences; none may fire on correct code under any
schedule the simulator can draw (the faults stay within what each rule assumes: an act in
flight lands by its lease expiry plus the grace, the store keeps what it acknowledged).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ...codec import fold_fields
from ...errors import CorruptCheckpoint, UnbrokenError
from ...state import RunState, Settlement
from ...watching import describe
from .world import World

WAITING = ("running_tools", "paused", "awaiting_approval")
"""Phases in which the newest turn's calls may still be unanswered."""


@dataclass(frozen=True)
class Violation:
    """One broken promise: which invariant, and what was seen."""

    invariant: str
    detail: str

    def __str__(self) -> str:
        return f"{self.invariant}: {self.detail}"


def effects_once(world: World) -> list[Violation]:
    """No side effect is executed twice under one idempotency key (an idempotent service
    de-duplicates repeats itself; a read-only one may be read any number of times)."""
    found = []
    for service in world.services.values():
        if service.effect != "side_effect":
            continue
        for key, count in service.applied_keys().items():
            if count > 1:
                tokens = [e.token for e in service.journal if e.key == key and e.applied]
                found.append(Violation("effects_once", f"{service.name} applied key {key[:14]} {count} times {tokens}"))
    return found


def no_stale_acts(world: World) -> list[Violation]:
    """A process that lost its lease never acts: every act reached its service under the run's
    current fence, or within the grace after the lease it was checked under expired."""
    found = []
    for service in world.services.values():
        for act in service.journal:
            if service.effect == "read_only" or not act.applied:
                continue
            if act.fence != act.head_fence and act.at > act.lease_expires_at + act.grace:
                found.append(
                    Violation(
                        "no_stale_acts",
                        f"p{act.process} ({act.owner}) acted on {service.name} with fence {act.fence} while the run's "
                        f"fence was {act.head_fence}, {act.at - act.lease_expires_at:.1f}s after its lease expired",
                    )
                )
    return found


def fences_unique(world: World) -> list[Violation]:
    """A fence token is handed to one holder only, and never goes down."""
    found = [Violation("fences_unique", line) for line in world.journal.fence_drops]
    holders: dict[tuple[str, int], str] = {}
    for run_id, fence, owner, process in world.journal.leases:
        other = holders.setdefault((run_id, fence), owner)
        if other != owner:
            found.append(Violation("fences_unique", f"fence {fence} of {run_id} given to {other} and to p{process}"))
    return found


def no_stale_writes(world: World) -> list[Violation]:
    """Every save the store took came from the holder of the run's current fence."""
    return [Violation("no_stale_writes", line) for line in world.journal.stale_writes]


def saves_kept(world: World) -> list[Violation]:
    """Every acknowledged save is still stored, unchanged (unless the run was rewritten)."""
    found = []
    for run_id in world.run_ids:
        if run_id in world.journal.rewritten:
            continue
        stored = {record.seq: record.checksum for record in world.store.records_since(run_id, 0)}
        for ack in world.journal.acks:
            if ack.run_id == run_id and stored.get(ack.seq) != ack.checksum:
                found.append(
                    Violation("saves_kept", f"acknowledged save {ack.seq} of {run_id} (p{ack.process}) is lost")
                )
    return found


def _final_states(world: World) -> tuple[dict[str, RunState], list[Violation]]:
    states: dict[str, RunState] = {}
    found = []
    for run_id in world.run_ids:
        if not any(ack.run_id == run_id for ack in world.journal.acks):
            continue
        try:
            states[run_id] = world.store.load(run_id)
        except UnbrokenError as exc:
            found.append(Violation("saves_load", f"{run_id} does not load: {type(exc).__name__}: {exc}"))
    return states, found


def answers_match(world: World, states: dict[str, RunState]) -> list[Violation]:
    """Every call in the history is answered once, right after its turn, with its own result."""
    found = []
    for run_id, state in states.items():
        messages = state.messages
        for index, message in enumerate(messages):
            uses = _blocks(message, "assistant", "tool_use")
            if not uses:
                continue
            answer = messages[index + 1] if index + 1 < len(messages) else None
            results = _blocks(answer, "user", "tool_result") if answer is not None else []
            if len(results) != len(uses) and not (answer is None and state.phase in WAITING):
                found.append(
                    Violation("answers_match", f"{run_id} message {index}: {len(uses)} calls, {len(results)} answers")
                )
                continue
            for use, result in zip(uses, results, strict=False):
                content = result.get("content")
                token = (use.get("input") or {}).get("token")
                where = f"{run_id} message {index}"
                if result.get("tool_use_id") != use.get("id"):
                    wrong = f"{where}: the answer for {result.get('tool_use_id')} was given to {use.get('id')}"
                    found.append(Violation("answers_match", wrong))
                elif isinstance(content, str) and content.startswith("ok ") and content != f"ok {token}":
                    found.append(Violation("answers_match", f"{where}: call {token} was answered {content!r}"))
    return found


def _blocks(message: Any, role: str, kind: str) -> list[dict[str, Any]]:
    if not isinstance(message, dict) or message.get("role") != role or not isinstance(message.get("content"), list):
        return []
    return [block for block in message["content"] if isinstance(block, dict) and block.get("type") == kind]


def counters_continue(world: World) -> list[Violation]:
    """Turns and tokens never go backwards from one save point to the next."""
    found = []
    for run_id in world.run_ids:
        try:
            timeline = world.store.history(run_id)
        except UnbrokenError:
            continue
        for before, after in itertools.pairwise(timeline):
            if after.turns < before.turns or after.tokens_used < before.tokens_used:
                found.append(
                    Violation(
                        "counters_continue",
                        f"{run_id} save {after.seq}: turns {before.turns}->{after.turns}, "
                        f"tokens {before.tokens_used}->{after.tokens_used}",
                    )
                )
    return found


def ledger_tells_truth(world: World) -> list[Violation]:
    """What the ledger says happened did: an act was preceded by its durable intent, and a
    call recorded as executed or found by a probe reached its service."""
    found = []
    for service in world.services.values():
        if service.effect == "read_only":
            continue
        for act in service.journal:
            if not act.applied:
                continue
            run_id = next((r for r in world.run_ids if world.store.ledger_get(r, act.key) is not None), None)
            if run_id is None:
                no_intent = f"{service.name} acted for {act.token} with no ledger intent"
                found.append(Violation("ledger_tells_truth", no_intent))
    for run_id in world.run_ids:
        for entry in world.store.ledger_list(run_id):
            result = entry.result
            if entry.status != "succeeded" or result is None or result.how not in ("executed", "probed"):
                continue
            if not any(service.has(entry.key) for service in world.services.values()):
                found.append(
                    Violation(
                        "ledger_tells_truth",
                        f"{run_id}: {entry.tool} {entry.key[:14]} recorded as {result.how} but never ran",
                    )
                )
    return found


def history_tells_truth(world: World) -> list[Violation]:
    """What the saves say about how each call was settled (``Settlement``, which ``unbroken
    history`` shows) is what happened: a call said to have run reached its service, one said to
    be settled by its probe had taken effect."""
    found = []
    reached: set[str] = set()
    applied: set[str] = set()
    for service in world.services.values():
        if service.effect != "read_only":
            reached.update(execution.key for execution in service.journal)
            applied.update(execution.key for execution in service.journal if execution.applied)
    for run_id in world.run_ids:
        try:
            records = world.store.decode(run_id, recover=True).records
        except UnbrokenError:
            continue
        fields: dict[str, Any] | None = None
        for record in records:
            try:
                fields = fold_fields(fields, record)
            except (ValueError, KeyError, TypeError):
                break
            calls = fields.get("pending_calls") or []
            for item in record.get("settled") or ():
                settled = Settlement.from_json(item)
                tool = world.agent.tools.get(settled.tool)
                if tool is None or tool.effect == "read_only" or settled.outcome not in ("ran", "probed"):
                    continue
                keys = {c["idempotency_key"] for c in calls if c["id"] == settled.call_id and c["name"] == settled.tool}
                happened = applied if settled.outcome == "probed" else reached
                if keys and not keys & happened:
                    said = f"{run_id} save {record['seq']}: {describe(settled)!r}, but it never reached its service"
                    found.append(Violation("history_tells_truth", said))
    return found


def moves_detected(world: World) -> list[Violation]:
    """A record copied over another place (``moves``) is damage: the run it landed in, while the
    copy is still there, is refused with ``CorruptCheckpoint``, never loaded with the copy in it."""
    found = []
    for move in world.journal.moves:
        there = [r for r in world.store.records_since(move.run_id, 0) if r.seq == move.seq]
        if not there or there[0].checksum != move.checksum:
            continue  # rewritten or lost since
        try:
            world.store.load(move.run_id)
        except CorruptCheckpoint:
            continue
        except UnbrokenError as exc:
            found.append(Violation("moves_detected", f"{move}: the load raised {type(exc).__name__}: {exc}"))
            continue
        found.append(Violation("moves_detected", f"{move}: the run loaded with the copy in it"))
    return found


def runs_finish(world: World) -> list[Violation]:
    """Once the faults stop and every process is back, every run reaches its end: nothing the
    faults left behind (a torn write, a lost reply, a zombie's lease) blocks it for good."""
    found = []
    for run_id in world.run_ids:
        if not world.finished(run_id):
            phase = world.phase(run_id) or "never saved"
            stuck = f"{run_id} is stuck in phase {phase}; last: {world.journal.trace[-2:]}"
            found.append(Violation("runs_finish", stuck))
    return found


def dead_holders_yield(world: World) -> list[Violation]:
    """A process provably dead never holds a run off: no run call is refused its lease while
    the live holder is a dead process of the refused one's host (a lease its write put there
    after it died included). Waiting the lease out is not enough: ``runs_finish`` sees a run
    finish once its 30 s have passed, but the resume the user started failed."""
    return [Violation("dead_holders_yield", line) for line in world.journal.blocked]


CHECKS: tuple[Callable[[World], list[Violation]], ...] = (
    effects_once,
    no_stale_acts,
    fences_unique,
    no_stale_writes,
    saves_kept,
    counters_continue,
    ledger_tells_truth,
    history_tells_truth,
    runs_finish,
    moves_detected,
    dead_holders_yield,
)


SURVIVE_LOSS = frozenset({"fences_unique", "no_stale_writes"})
"""Invariants that hold even after the store lost what its durability lets it lose (a restart
losing the last second, or everything): fences never restart from nothing
(``stores.base.next_fence``), so no fence is handed out twice and no holder from before the
loss writes after it. A schedule with a loss that breaks one of these fails."""

SURVIVE_DAMAGE = frozenset({"effects_once", "no_stale_acts", "fences_unique", "no_stale_writes", "moves_detected"})
"""Invariants that hold even after a record was moved (``moves``): the run it landed in is
refused as damage (it neither loads nor finishes, its acknowledged save is overwritten: that is
the damage's cost, reported apart), but nothing acts twice or out of turn, and the damage is
detected. A schedule with a move that breaks one of these fails."""


def check(world: World) -> list[Violation]:
    """Every invariant over the world as the schedule left it."""
    found: list[Violation] = []
    for invariant in CHECKS:
        found += invariant(world)
    states, unloadable = _final_states(world)
    return found + unloadable + answers_match(world, states)
