"""Resuming never silently starts over (issue 21 item 3): ``Agent.resume``/``aresume`` and a
worker re-claiming a run it saw saved raise or report ``RunNotFound`` when the store lost the
run, where ``run(task, run_id=...)`` would start it from nothing and repeat its side effects."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from unbroken import Agent, RunNotFound, RunQueued, ScriptedModel, Store, open_store, tool
from unbroken.stores.memory import InMemoryStore
from unbroken.worker import Worker

CHARGE: dict[str, Any] = {
    "content": [{"type": "tool_use", "id": "t1", "name": "charge", "input": {"cents": 500}}],
    "stop_reason": "tool_use",
    "usage": {},
}
FINAL: dict[str, Any] = {"content": [{"type": "text", "text": "done"}], "stop_reason": "end_turn", "usage": {}}


def charging_agent(store: Store, charged: list[int], script: list[dict[str, Any]]) -> Agent:
    @tool(effect="side_effect")
    def charge(cents: int) -> str:
        charged.append(cents)
        return "charged"

    return Agent(ScriptedModel(script), [charge], store)


def lose(store: Store, run_id: str) -> None:
    """The store loses the run's head, records and ledger; its queue entry survives (a partial
    eviction, or a restore of part of the data)."""
    assert isinstance(store, InMemoryStore)
    del store.backend._runs[run_id]


def test_resume_continues_a_stored_run_from_its_save_point() -> None:
    store, charged = open_store("memory://"), list[int]()
    agent = charging_agent(store, charged, [CHARGE])
    with pytest.raises(Exception, match="ScriptExhausted"):
        agent.run("charge once", run_id="r1")

    result = charging_agent(store, charged, [CHARGE, FINAL]).resume("r1")

    assert result.status == "completed"
    assert charged == [500]


def test_resume_and_aresume_of_a_lost_run_raise_run_not_found_and_start_nothing() -> None:
    store, charged = open_store("memory://"), list[int]()
    agent = charging_agent(store, charged, [CHARGE, FINAL])
    agent.run("charge once", run_id="r1")
    lose(store, "r1")

    with pytest.raises(RunNotFound, match="resume\\(\\) never starts a run"):
        agent.resume("r1")
    with pytest.raises(RunNotFound):
        asyncio.run(agent.aresume("r1"))

    assert charged == [500]
    assert not store.exists("r1")


def test_resume_of_a_queued_run_says_it_is_queued() -> None:
    store = open_store("memory://")
    store.submit("charge once", "r1")

    with pytest.raises(RunQueued):
        charging_agent(store, [], [CHARGE, FINAL]).resume("r1")


def test_a_worker_never_starts_over_a_run_it_saw_saved_and_the_store_lost() -> None:
    store, charged = open_store("memory://"), list[int]()
    worker = Worker(lambda s: charging_agent(s, charged, [CHARGE]), store, retry_after=0.05, poll_interval=0.05)
    store.submit("charge once", "r1")
    first = worker.run(until_idle=True, max_runs=1)  # charges, then the model fails: left for retry
    assert (first.errors, charged) == (1, [500])
    lose(store, "r1")

    stats = worker.run(until_idle=True, max_runs=2)

    assert charged == [500]  # not charged again
    assert stats.data_lost == 1
    assert store.backend.records_after("r1", 0) == []  # nothing was started in its place


def test_a_fresh_worker_never_starts_over_a_run_whose_saves_the_store_lost_but_not_its_ledger() -> None:
    """A worker with no memory of the run (a new process) sees a queued run with no save
    point, as if never started; its effect ledger says it ran a charge, so it is lost data."""
    store, charged = open_store("memory://"), list[int]()
    store.submit("charge once", "r1")
    first = Worker(lambda s: charging_agent(s, charged, [CHARGE]), store, retry_after=0.05, poll_interval=0.05)
    assert first.run(until_idle=True, max_runs=1).errors == 1  # charged, then the model failed
    entries = store.ledger_list("r1")
    lose(store, "r1")
    for entry in entries:  # the ledger survived the loss
        store.ledger_put(entry)
    fresh = Worker(lambda s: charging_agent(s, charged, [CHARGE, FINAL]), store, retry_after=0.05, poll_interval=0.05)

    stats = fresh.run(until_idle=True, max_runs=2)

    assert charged == [500]  # not charged again
    assert stats.data_lost >= 1
    assert store.backend.records_after("r1", 0) == []
