"""``Agent.arun`` on PostgreSQL: every store call in the store's own threads, never on the event
loop, and as many threads at once as the store has connections (issue 24 goal 2)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from pgtest import with_options

from faults_kit.store_threads import arun_many, gate_saves
from unbroken import Agent, ScriptedModel, tool
from unbroken.stores.offload import executor, off_loop
from unbroken.stores.postgres import PostgresStore


def test_concurrent_aruns_on_postgres_never_call_the_store_on_the_loop(pg_store: PostgresStore) -> None:
    threads, statuses, charges = arun_many(pg_store, 8)
    assert statuses == ["completed"] * 8
    assert sorted(charges) == list(range(8))  # each run charged once
    assert threads.calls and threads.on_loop() == []


def test_postgres_store_threads_hold_pool_size_connections_at_once(pg_url: str) -> None:
    store = PostgresStore(with_options(pg_url, pool_size="3"))
    together = threading.Barrier(3, timeout=1.0)  # < the pool's 2 s wait for a connection

    def hold_a_connection() -> int:
        return store.backend._run(lambda conn, _retried: (conn.execute("SELECT 1"), together.wait())[1])

    async def main() -> list[int]:
        return await asyncio.gather(*(off_loop(store, hold_a_connection) for _ in range(3)))

    try:
        assert store.concurrency == 3 and executor(store)._max_workers == 3
        assert sorted(asyncio.run(main())) == [0, 1, 2]
    finally:
        store.close()


def test_a_cancel_during_a_postgres_save_waits_for_it_and_the_resume_charges_once(pg_store: PostgresStore) -> None:
    gate = gate_saves(pg_store)
    charges: list[int] = []

    @tool(effect="side_effect")
    def charge(amount: int) -> str:
        charges.append(amount)
        gate.arm()  # the next save (this call's result) is held
        return f"charged {amount}"

    call = {"type": "tool_use", "id": "c1", "name": "charge", "input": {"amount": 5}}
    script: list[dict[str, Any]] = [
        {"content": [call], "stop_reason": "tool_use", "usage": {}},
        {"content": [{"type": "text", "text": "done"}], "stop_reason": "end_turn", "usage": {}},
    ]

    def agent() -> Agent:
        return Agent(ScriptedModel(script), [charge], pg_store)

    async def main() -> None:
        task = asyncio.create_task(agent().arun("charge", run_id="r"))
        while not gate.entered.is_set():
            await asyncio.sleep(0.005)
        task.cancel()
        await asyncio.sleep(0.05)
        assert not task.done()  # still waiting for the save in flight
        gate.release.set()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert gate.released_lease_after_save is True and pg_store.lease_of("r") is None
    assert pg_store.load("r").save_seq == gate.saved
    assert asyncio.run(agent().aresume("r")).status == "completed"
    assert charges == [5]
