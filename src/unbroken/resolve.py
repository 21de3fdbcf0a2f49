"""Settling, by hand, a call whose outcome is unknown (``unbroken resolve``)."""

from __future__ import annotations

from . import clock
from .codec import Encoder
from .errors import ConfigError
from .leases import acquire, make_owner
from .ledger import EffectLedger
from .state import LedgerEntry, RunState, Settlement, ToolResult
from .stores.base import Store


def resolve_call(
    store: Store,
    run_id: str,
    call_id: str,
    *,
    result: str | None = None,
    not_executed: bool = False,
    is_error: bool = False,
) -> RunState:
    """Settle a call whose outcome is unknown, as a person who checked it: either it took
    effect (``result`` is what the model will be told) or it did not (``not_executed``: it
    will run when the run resumes). Durable when it returns; refuses if the run is live."""
    if (result is None) == (not not_executed):
        raise ConfigError("give exactly one of result=... or not_executed=True")
    owner = make_owner()
    lease = acquire(store, run_id, owner, 30.0)
    try:
        from .paging import read_tail

        state = read_tail(store, run_id).state  # the tail: the unsettled calls are in its small fields
        # The first unsettled call with that id (a provider may reuse ids), or with that key.
        call = next((c for c in state.dangling_calls() if call_id in (c.id, c.idempotency_key)), None)
        if call is None:
            open_ids = ", ".join(c.id for c in state.dangling_calls()) or "none"
            raise ConfigError(f"run {run_id!r} has no unsettled call {call_id!r}; unsettled calls: {open_ids}")
        encoder = Encoder()
        encoder.prime(state)
        ledger_entries: tuple[LedgerEntry, ...] = ()
        entry = store.ledger_get(run_id, call.idempotency_key)
        account_of: list[Settlement] = []
        if result is not None:
            why = "a person said it took effect (unbroken resolve)" if not is_error else "a person settled it as failed"
            found = entry.status if entry is not None else None
            account_of.append(Settlement(call.id, call.name, "resolved", ledger=found, reason=why))
            settled = ToolResult(call.id, result, is_error, "resolved")
            state.results[call.idempotency_key] = settled
            if entry is not None:
                ledger_entries = (EffectLedger.outcome(entry, settled),)
        else:
            state.resolutions[call.idempotency_key] = "not_executed"
        if state.phase == "paused":
            state.phase = "running_tools"
            state.error = None
        state.save_seq += 1
        state.updated_at = clock.wall()
        account = {"settled": [settlement.to_json() for settlement in account_of]} if account_of else None
        encoded = encoder.encode(state, "resolved", ledger=ledger_entries, account=account)
        store.append(encoded, expect_seq=state.save_seq - 1, fence=lease.fence)
        return state
    finally:
        store.release_lease(lease)
