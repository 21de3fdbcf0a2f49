"""An imported checkpoint that reuses another run's idempotency key never touches that run's
effect ledger, on every store: the victim's entries, their checksums and its resume stay as they
were, and each run's call is settled in its own entry (issue 21: ledger keys are per run)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_store_contract import BACKENDS, Backend

from unbroken import Agent, CorruptCheckpoint, Found, ScriptedModel, Store, ToolCall, open_store, tool
from unbroken.importing import import_run
from unbroken.stores.backend import SealedEntry
from unbroken.testing.contract import ledger_entry

KEY = "refund-order-7"
"""The key the practice article's harness gave its pending refund: both checkpoints carry it."""
FINAL = {"content": [{"type": "text", "text": "Done."}], "stop_reason": "end_turn", "usage": {}}


def checkpoint(run_id: str, order: str) -> dict[str, Any]:
    """A practice-article checkpoint saved after the model asked for a refund, before it ran."""
    return {
        "run_id": run_id,
        "step_id": 1,
        "phase": "pre_tool",
        "messages": [{"role": "user", "content": f"Refund order {order}"}],
        "business_state": {},
        "pending_action": {"tool": "refund", "args": {"order_id": order}, "idempotency_key": KEY},
        "schema_version": 3,
    }


def agent_on(store: Store, refunds: list[str]) -> Agent:
    def refund_exists(call: ToolCall) -> Found:
        return Found(f"refund of order {call.input['order_id']} exists")

    @tool(effect="side_effect", probe=refund_exists)
    def refund(order_id: str) -> str:
        """Refund an order."""
        refunds.append(order_id)
        return "refunded"

    return Agent(ScriptedModel([FINAL, FINAL]), tools=[refund], store=store)  # answer 1: the imported turn


@pytest.fixture(params=BACKENDS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    backend: Backend = request.param
    opened = backend.open(tmp_path)
    yield opened
    opened.close()


def test_an_import_reusing_another_runs_key_leaves_that_runs_ledger_and_resume_intact(store: Store) -> None:
    import_run(store, checkpoint("victim", "7"))
    before = store.ledger_list("victim")
    assert [(e.key, e.status) for e in before] == [(KEY, "pending")]

    import_run(store, checkpoint("intruder", "8"))

    assert store.ledger_list("victim") == before  # same entry, checksum holds (ledger_list checks it)
    assert [(e.run_id, e.key, e.call_id) for e in store.ledger_list("intruder")] == [("intruder", KEY, "imported_1")]
    refunds: list[str] = []
    victim = agent_on(store, refunds).run(None, run_id="victim")
    intruder = agent_on(store, refunds).run(None, run_id="intruder")
    assert (victim.status, intruder.status, refunds) == ("completed", "completed", [])  # nothing re-run blindly
    settled = {e.run_id: e for run in ("victim", "intruder") for e in store.ledger_list(run)}
    assert {run: (e.status, e.result.content if e.result else None) for run, e in settled.items()} == {
        "victim": ("succeeded", "refund of order 7 exists"),
        "intruder": ("succeeded", "refund of order 8 exists"),
    }


def test_a_claim_answered_with_another_runs_entry_is_corrupt_and_never_used() -> None:
    """If a backend ever hands a claim another run's entry (a damaged or edited store), the claim
    fails with ``CorruptCheckpoint`` naming both runs; the entry is never taken as this run's."""
    foreign = SealedEntry(ledger_entry("run-foreign", key="k"), None)
    with open_store("memory://") as store:
        store.backend.insert_entry = lambda sealed, *, fence: foreign  # type: ignore[method-assign]
        with pytest.raises(CorruptCheckpoint, match="run-foreign"):
            store.ledger_claim(ledger_entry("run-mine", key="k"))
