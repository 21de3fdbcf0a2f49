"""The takeover grace ("may the holder that started this call still act?") is a wait the step
machine yields (``engine.Sleep``) and its driver performs: ``run`` on the clock seam, ``arun``
on the event loop. Under ``arun`` it holds no store thread, so the other runs of a local store
(one store thread per process) go on meanwhile; and in both the call is not acted on before
the wait is over."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from core_scripts import final_turn, tool_turn

from unbroken import Agent, ScriptedModel, ToolCall, current_lease, ops, tool
from unbroken.leases import make_owner, take_lease
from unbroken.stores.sqlite import SQLiteStore
from unbroken.tools import Found, NotExecuted, ProbeAnswer

GRACE = 1.0  # long enough that run B (a few saves) ends well inside it on any machine


class Killed(BaseException):
    """The first attempt's process dies inside the tool: its ledger intent is left in doubt."""


def _in_doubt(store: SQLiteStore, events: list[str], waits: list[float]) -> Agent:
    """Leave run "a" with a call in doubt, started under a fence older than our predecessor's:
    whoever takes it over waits the full grace before trusting "not executed". Returns the
    agent that takes it over; its tool notes how long it still had to wait when it acted."""
    first = True

    def probe(call: ToolCall) -> NotExecuted:
        events.append("probe")
        return NotExecuted()

    @tool(effect="side_effect", probe=probe)
    def charge(amount: int) -> str:
        nonlocal first
        if first:
            first = False
            raise Killed
        waits.append(current_lease().absence_needs_wait(entry))
        events.append("a acted")
        return f"charged {amount}"

    script = [tool_turn(("c1", "charge", {"amount": 5})), final_turn()]
    agent = Agent(model=ScriptedModel(script), tools=[charge], store=store, lease_grace=GRACE)
    with pytest.raises(Killed):
        agent.run("charge", run_id="a")
    (entry,) = store.ledger_list("a")
    take_lease(store, "a", make_owner(), 5).release()  # a predecessor that gave the run up cleanly
    return agent


def _waited(store: SQLiteStore) -> bool:
    return any("after waiting" in line for lines in ops.settlements(store, "a").values() for line in lines)


def test_run_waits_the_grace_before_acting_on_not_executed(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "runs.db")
    events: list[str] = []
    waits: list[float] = []
    agent = _in_doubt(store, events, waits)
    assert agent.run(run_id="a").status == "completed"
    assert events == ["probe", "probe", "a acted"]  # asked again after the wait, then acted
    assert waits == [0.0]  # by the time it acted, the holder that started it could no longer act
    assert _waited(store)


def test_arun_waits_the_grace_on_the_loop_while_other_runs_of_the_store_go_on(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "runs.db")
    events: list[str] = []
    waits: list[float] = []
    agent_a = _in_doubt(store, events, waits)

    @tool(effect="side_effect")
    def note(text: str) -> str:
        events.append("b acted")
        return text

    script = [tool_turn(("n1", "note", {"text": "x"})), tool_turn(("n2", "note", {"text": "y"})), final_turn()]
    agent_b = Agent(model=ScriptedModel(script), tools=[note], store=store)

    async def main() -> None:
        a = asyncio.create_task(agent_a.aresume("a"))
        while "probe" not in events:  # A has asked once and is now waiting its grace
            await asyncio.sleep(0.001)
        assert (await agent_b.arun("note twice", run_id="b")).status == "completed"
        events.append("b done")
        assert (await a).status == "completed"

    asyncio.run(main())
    # B's saves went through the store's one thread while A waited: B was done before A asked again.
    assert events == ["probe", "b acted", "b acted", "b done", "probe", "a acted"]
    assert waits == [0.0]  # and A did not act before whoever started its call could no longer act
    assert _waited(store)


def test_arun_cancelled_during_the_grace_releases_the_lease_and_acts_on_nothing(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "runs.db")
    events: list[str] = []
    waits: list[float] = []
    agent = _in_doubt(store, events, waits)

    async def main() -> None:
        a = asyncio.create_task(agent.aresume("a"))
        while "probe" not in events:
            await asyncio.sleep(0.001)
        a.cancel()
        with pytest.raises(asyncio.CancelledError):
            await a

    asyncio.run(main())
    assert events == ["probe"] and waits == []
    assert take_lease(store, "a", make_owner(), 5).takeover.how == "released"  # not left to expire


def test_a_not_executed_read_before_the_grace_ended_is_asked_again_even_if_it_answers_after(tmp_path: Path) -> None:
    # The probe reads "not executed" inside the grace and answers after it (a slow service, a
    # loaded machine); the holder that started the call acts in between. The answer is what the
    # probe read, not evidence: asked again, it finds the act (found by the zombie sweep on a
    # loaded machine: two charges).
    store = SQLiteStore(tmp_path / "runs.db")
    events: list[str] = []
    charged: list[str] = []
    first = True

    def probe(call: ToolCall) -> ProbeAnswer:
        events.append("probe")
        seen = list(charged)
        if len(events) == 1:
            time.sleep(GRACE + 0.3)  # the answer comes back once the grace is over...
            charged.append("the first holder")  # ...and the holder acted after the read
        return Found("charged") if seen else NotExecuted()

    @tool(effect="side_effect", probe=probe)
    def charge(amount: int) -> str:
        nonlocal first
        if first:
            first = False
            raise Killed
        charged.append("the taker")
        return f"charged {amount}"

    script = [tool_turn(("c1", "charge", {"amount": 5})), final_turn()]
    agent = Agent(model=ScriptedModel(script), tools=[charge], store=store, lease_grace=GRACE)
    with pytest.raises(Killed):
        agent.run("charge", run_id="a")
    take_lease(store, "a", make_owner(), 5).release()
    assert agent.run(run_id="a").status == "completed"
    assert events == ["probe", "probe"] and charged == ["the first holder"]
