"""Switching existing defences off, one at a time, to show the simulator finds the hole each
one closes (a checker that cannot fail proves nothing).

``MUTATIONS`` maps a name to a context manager that patches the defence out while it is
entered. The registry also names defences being built elsewhere whose switch point is not known
here yet (``PENDING``), with the hole the invariants would show.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

from ... import acceptance, codec, fencing, leases, segment_read, session, usage
from ...model import ProposedCall
from ...state import ToolCall, idempotency_key
from ...stores import _redis_settings, base
from ...stores.memory import InMemoryStore
from .lossy import ForgetfulStore, evicting


@contextmanager
def _patched(owner: Any, name: str, replacement: Any) -> Iterator[None]:
    original = vars(owner)[name]
    setattr(owner, name, replacement)
    try:
        yield
    finally:
        setattr(owner, name, original)


def no_lease_check() -> AbstractContextManager[None]:
    """``fencing.LeaseGuard.acting`` lets the tool run without checking the lease first."""

    @contextmanager
    def acting(self: fencing.LeaseGuard, effect: str) -> Iterator[fencing.LeaseGuard]:
        token = fencing._CURRENT.set(self)
        try:
            yield self
        finally:
            fencing._CURRENT.reset(token)

    return _patched(fencing.LeaseGuard, "acting", acting)


def no_grace() -> AbstractContextManager[None]:
    """``fencing.LeaseGuard.absence_needs_wait`` trusts "not executed" at once."""
    return _patched(fencing.LeaseGuard, "absence_needs_wait", lambda self, entry=None: 0.0)


def grace_not_inherited() -> AbstractContextManager[None]:
    """``fencing.LeaseGuard.started_before_predecessor`` says no: an in-doubt attempt is judged
    by how our predecessor gave the run up, even when an older, displaced holder started it."""
    return _patched(fencing.LeaseGuard, "started_before_predecessor", lambda self, entry: False)


@contextmanager
def no_write_fencing() -> Iterator[None]:
    """The store's rules drop the fence from every write (``Store.append``, ``ledger_claim``,
    ``ledger_put``, ``rewrite``): a zombie's write lands when its expected seq still matches."""
    patches = []
    for name in ("append", "ledger_claim", "ledger_put", "rewrite"):
        original = base.Store.__dict__[name]

        def unfenced(self: base.Store, *args: Any, _original: Callable[..., Any] = original, **kwargs: Any) -> Any:
            kwargs["fence"] = None
            return _original(self, *args, **kwargs)

        patches.append(_patched(base.Store, name, unfenced))
    for patch in patches:
        patch.__enter__()
    try:
        yield
    finally:
        for patch in reversed(patches):
            patch.__exit__(None, None, None)


def calls_keyed_by_id() -> AbstractContextManager[None]:
    """``session.RunSession.to_tool_call`` keys a call by the provider's id alone (the old key),
    so a provider reusing ``call_0`` every turn shares one ledger entry across turns."""
    original = session.RunSession.to_tool_call

    def to_tool_call(self: session.RunSession, proposed: ProposedCall, position: int) -> ToolCall:
        call = original(self, proposed, position)
        call.idempotency_key = idempotency_key(self.run_id, proposed.id)
        return call

    return _patched(session.RunSession, "to_tool_call", to_tool_call)


def naive_usage() -> AbstractContextManager[None]:
    """``usage.account_turn`` adds whatever the provider reports (as before odd usage was
    normalised: a negative count saved a run that no load accepts)."""

    def account_turn(
        tokens_used: int, total: dict[str, Any], tokens: object, turn_usage: object
    ) -> tuple[int, dict[str, Any]]:
        merged = dict(total)
        for key, value in (turn_usage if isinstance(turn_usage, dict) else {}).items():
            previous = merged.get(key)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                merged[key] = (previous if isinstance(previous, (int, float)) else 0) + value
            else:
                merged[key] = value
        return tokens_used + int(tokens), merged  # type: ignore[call-overload]

    return _patched(usage, "account_turn", account_turn)


def no_write_time_check() -> AbstractContextManager[None]:
    """``codec.accept_before_save`` lets every save through: a state no load accepts (an agent
    configured with ``business_state_version=-1``) is written and acknowledged."""
    return _patched(codec, "accept_before_save", lambda fields, state: None)


def no_eviction_check() -> AbstractContextManager[None]:
    """``stores._redis_settings.check_eviction`` accepts every ``maxmemory-policy``: a store
    whose server evicts run keys under memory pressure is opened, and side effects run on it."""
    return _patched(_redis_settings, "check_eviction", lambda policy, where, *, assumed_safe: None)


def fences_from_nothing() -> AbstractContextManager[None]:
    """``stores.base.next_fence`` counts from the stored fence alone (no floor from the store's
    clock): after a store lost everything, fences restart at 1, and a new holder may get the
    fence a live holder from before the loss still writes under."""
    return _patched(base, "next_fence", lambda previous, store_time: previous + 1)


def no_record_seq_check() -> AbstractContextManager[None]:
    """``acceptance`` no longer checks that a record's own ``seq`` is the place it was read from:
    a record copied over the next save of its run (``moves``) is folded as that save whenever the
    two start at the same message (a save that added no message)."""
    intact = acceptance.intact

    def seq_unchecked(value: Any, seq: int, current: int) -> bool:
        claimed = value.get("seq") if isinstance(value, dict) else seq
        return bool(intact(value, claimed if type(claimed) is int else seq, current))

    def run_seq_unchecked(values: list[Any], first: int, version: int) -> bool:
        return all(
            seq_unchecked(value, seq, version) and value["v"] == version for seq, value in enumerate(values, first)
        )

    @contextmanager
    def both() -> Iterator[None]:
        # (segment_read binds the check by name for its one-parse read of a segment: intact_run)
        with _patched(acceptance, "intact", seq_unchecked), _patched(segment_read, "intact_run", run_seq_unchecked):
            yield

    return both()


def one_judging() -> AbstractContextManager[None]:
    """``leases.take_lease`` judges the holder once: when the store's swap finds a holder the
    judgment did not see (a dead process's lease write that landed after the head was read), the
    store's refusal stands (``LeaseHeld`` for the whole lease)."""
    return _patched(leases, "_JUDGINGS", 1)


def pid_only() -> AbstractContextManager[None]:
    """A holder on this host is judged by its pid alone (``owners._process_state`` without the
    start time): a dead holder whose pid another program got counts as alive, and blocks the run."""
    from . import world

    return _patched(world, "COMPARE_START_TIMES", False)


def unbound_records() -> AbstractContextManager[None]:
    """``acceptance.run_seed`` is 0 for every run: records are written with the plain CRC-32 and
    read as a run written before records were bound to their run, so a delta of another run
    copied over the same save at the same message position is folded into this run."""
    return _patched(acceptance, "_BIND_RECORDS", False)


MUTATIONS: dict[str, Callable[[], AbstractContextManager[None]]] = {
    "lease_check": no_lease_check,
    "grace": no_grace,
    "grace_inheritance": grace_not_inherited,
    "write_fencing": no_write_fencing,
    "occurrence_keys": calls_keyed_by_id,
    "usage_guard": naive_usage,
    "write_time_check": no_write_time_check,
    "durability_preconditions": no_eviction_check,
    "fence_floor": fences_from_nothing,
    "record_seq_check": no_record_seq_check,
    "judge_again": one_judging,
    "start_time": pid_only,
    "run_binding": unbound_records,
}
"""Each switched-off defence, by name."""

STORES: dict[str, Callable[[], base.Store]] = {"durability_preconditions": evicting, "fence_floor": ForgetfulStore}
"""The store a defence's row is played on, when not a fresh ``InMemoryStore`` (an evicting
server: with the check on, the world refuses it at open; off, it evicts run keys; a forgetful
one, whose restarts lose data: fences must not restart with it)."""


def store_of(name: str) -> Callable[[], base.Store]:
    """The store factory the row ``name`` is played on."""
    return STORES.get(name, InMemoryStore)


PENDING: dict[str, str] = {}
"""Defences built on other branches: the hole the invariants detect once they can be switched."""
