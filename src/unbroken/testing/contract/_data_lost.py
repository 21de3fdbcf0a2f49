"""The contract on lost data: a run whose head vanished under its live holder is ``StoreDataLost``.

A server restarted without its data, keys evicted under memory pressure, a run deleted under
its holder: every later write or renewal of the holder is refused, and the refusal says the
data was lost (side effects may repeat), never "another worker took the run" (``LeaseLost``).
The suite loses the data with ``delete_run`` (the head, the records and the ledger at once, as
an emptied server would), then takes the run again from nothing (a fence that is still higher:
``next_fence``) or writes a head as an old backup would hold it (a fence that went back).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from ...errors import LeaseLost, StoreDataLost
from ...providers.scripted import ScriptedModel
from ...runner import Agent
from ...state import Lease, idempotency_key
from ...stores.backend import RunHead
from ...stores.base import Store
from ...tools import tool
from ._base import ContractBase
from ._support import LONG_TTL, RunWriter, ledger_entry


def _charge_turn(call_id: str) -> dict[str, Any]:
    call = {"type": "tool_use", "id": call_id, "name": "charge", "input": {"cents": 500}}
    return {"content": [call], "stop_reason": "tool_use", "usage": {"input_tokens": 1, "output_tokens": 1}}


class DataLostContract(ContractBase):
    """A holder's refused write or renewal tells lost data (``StoreDataLost``) from a takeover."""

    def _held_run(self, store: Store, run_id: str, turns: int = 2) -> tuple[RunWriter, Lease]:
        lease = store.acquire_lease(run_id, "worker-a", LONG_TTL)
        run = RunWriter(store, run_id)
        for step in range(1, turns + 1):
            run.turn(step, fence=lease.fence)
        return run, lease

    def test_append_after_the_run_vanished_under_its_holder_raises_store_data_lost(self, store: Store) -> None:
        run, lease = self._held_run(store, "run-lost-append")
        store.delete_run("run-lost-append")  # the server came back empty

        with pytest.raises(StoreDataLost) as lost:
            run.turn(3, fence=lease.fence)

        assert "run-lost-append" in str(lost.value) and "head is gone" in str(lost.value)
        assert (store.head_of("run-lost-append") or RunHead()) == RunHead()  # no head written
        assert store.records_since("run-lost-append", 0) == []

    def test_renewal_after_the_run_vanished_raises_store_data_lost(self, store: Store) -> None:
        _, lease = self._held_run(store, "run-lost-renew")
        store.delete_run("run-lost-renew")

        with pytest.raises(StoreDataLost):
            store.renew_lease(lease, LONG_TTL)

        assert (store.head_of("run-lost-renew") or RunHead()) == RunHead()

    def test_fenced_ledger_writes_after_the_run_vanished_raise_store_data_lost(self, store: Store) -> None:
        _, lease = self._held_run(store, "run-lost-ledger")
        store.delete_run("run-lost-ledger")
        entry = ledger_entry("run-lost-ledger")

        with pytest.raises(StoreDataLost):
            store.ledger_claim(entry, fence=lease.fence)
        with pytest.raises(StoreDataLost):
            store.ledger_put(entry, fence=lease.fence)

        assert store.ledger_get("run-lost-ledger", entry.key) is None

    def test_a_fence_that_went_backwards_is_store_data_lost_and_the_new_run_is_untouched(self, store: Store) -> None:
        for _ in range(2):  # the holder's fence is the third handed out
            store.acquire_lease("run-lost-fence", "worker-a", LONG_TTL)
        run, lease = self._held_run(store, "run-lost-fence")
        store.delete_run("run-lost-fence")
        store.backend.swap_head("run-lost-fence", None, RunHead(0, 1, None, 0.0))  # a head from an old backup
        RunWriter(store, "run-lost-fence", task="restored").turn(1)
        before = store.read_records("run-lost-fence")

        with pytest.raises(StoreDataLost) as lost:
            run.turn(3, fence=lease.fence)
        with pytest.raises(StoreDataLost):
            store.renew_lease(lease, LONG_TTL)

        assert "went back" in str(lost.value)
        assert store.read_records("run-lost-fence") == before

    def test_a_new_holder_after_a_restore_from_an_old_backup_gets_a_fence_above_the_live_holders(
        self, store: Store
    ) -> None:
        """The restored head holds an old, low fence; the next holder's is still above the live
        holder's (``next_fence``), whose save is then refused as lost data (its save number
        went back under another holder)."""
        run, lease = self._held_run(store, "run-lost-restore", turns=2)
        store.delete_run("run-lost-restore")
        store.backend.swap_head("run-lost-restore", None, RunHead(0, 1, None, 0.0))  # the backup's head
        RunWriter(store, "run-lost-restore", task="restored").turn(1)

        fresh = store.acquire_lease("run-lost-restore", "worker-b", LONG_TTL)

        assert fresh.fence > lease.fence and fresh.previous_fence == 1
        with pytest.raises(StoreDataLost, match="save number went back from 2 to 1 and another holder took it"):
            run.turn(3, fence=lease.fence)

    def test_a_new_holder_after_a_total_loss_gets_a_higher_fence_and_the_old_holder_is_refused(
        self, store: Store
    ) -> None:
        """Fences do not restart from nothing after the store lost everything (a server
        restarted empty): the next one is never below the store's clock in microseconds
        (``next_fence``), so a holder from before the loss can never share the new holder's."""
        run, lease = self._held_run(store, "run-lost-same", turns=3)
        store.delete_run("run-lost-same")
        fresh = store.acquire_lease("run-lost-same", "worker-b", LONG_TTL)
        RunWriter(store, "run-lost-same", task="started again").turn(1, fence=fresh.fence)
        before = store.read_records("run-lost-same")

        assert fresh.fence > lease.fence
        with pytest.raises((LeaseLost, StoreDataLost)):
            run.turn(4, fence=lease.fence)
        with pytest.raises((LeaseLost, StoreDataLost)):
            store.renew_lease(lease, LONG_TTL)
        with pytest.raises((LeaseLost, StoreDataLost)):
            store.ledger_put(ledger_entry("run-lost-same", "call_late"), fence=lease.fence)
        assert store.read_records("run-lost-same") == before

    def test_the_old_holder_of_a_run_lost_and_saved_again_is_told_the_data_was_lost(self, store: Store) -> None:
        run, lease = self._held_run(store, "run-lost-seq", turns=3)
        store.delete_run("run-lost-seq")
        fresh = store.acquire_lease("run-lost-seq", "worker-b", LONG_TTL)
        RunWriter(store, "run-lost-seq", task="started again").turn(1, fence=fresh.fence)

        with pytest.raises(StoreDataLost, match="save number went back from 3 to 1"):
            run.turn(4, fence=lease.fence)

    def test_a_takeover_is_still_lease_lost_not_store_data_lost(self, store: Store) -> None:
        run, lease = self._held_run(store, "run-lost-takeover")
        store.acquire_lease("run-lost-takeover", "worker-b", LONG_TTL, takeover_from="worker-a")

        with pytest.raises(LeaseLost):
            run.turn(3, fence=lease.fence)
        with pytest.raises(LeaseLost):
            store.renew_lease(lease, LONG_TTL)

    # ------------------------------------------------------------------ through the agent

    def _agent_losing_its_run(self, store: Store, run_id: str) -> tuple[Agent, list[int]]:
        """An agent whose ``charge`` tool runs once, after which the store loses the run."""
        charged: list[int] = []

        @tool(effect="idempotent")
        def charge(cents: int) -> str:
            charged.append(cents)
            store.delete_run(run_id)  # the store loses everything while the run holds its lease
            return f"charged {cents}"

        script = [_charge_turn("toolu_1"), _charge_turn("toolu_2")]
        return Agent(ScriptedModel(script), [charge], store, lease_ttl=LONG_TTL), charged

    def test_run_raises_store_data_lost_when_the_store_loses_the_run(self, store: Store) -> None:
        agent, charged = self._agent_losing_its_run(store, "run-lost-agent")

        with pytest.raises(StoreDataLost):
            agent.run("charge twice", run_id="run-lost-agent")

        assert charged == [500]  # stopped at the loss: the second charge never ran
        assert store.ledger_get("run-lost-agent", idempotency_key("run-lost-agent", "toolu_1")) is None

    def test_arun_raises_store_data_lost_when_the_store_loses_the_run(self, store: Store) -> None:
        agent, charged = self._agent_losing_its_run(store, "run-lost-agent-async")

        with pytest.raises(StoreDataLost):
            asyncio.run(agent.arun("charge twice", run_id="run-lost-agent-async"))

        assert charged == [500]
