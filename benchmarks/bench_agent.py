"""End to end: a real ``Agent.run`` with a ``ScriptedModel`` and a read-only tool, per turn.

This includes everything a turn costs apart from a real model: the scripted model's answer,
the tool call, reconciliation bookkeeping, the lease, both save points. The same run on
``memory://`` shows what the loop costs without any disk.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import workload
from bench_store import read_ticket
from unbroken import Agent, ScriptedModel, open_store


@dataclass
class AgentResult:
    store: str
    turns: int
    per_turn_seconds: float


def agent_per_turn(name: str, url: str, turns: int) -> AgentResult:
    store = open_store(url)
    try:
        run_id = f"agent-{turns}"
        store.delete_run(run_id)
        agent = Agent(
            model=ScriptedModel(workload.script(turns)), tools=[read_ticket], store=store, max_turns=turns + 1
        )
        started = time.perf_counter()
        result = agent.run(workload.TASK, run_id=run_id)
        elapsed = time.perf_counter() - started
    finally:
        store.close()
    if result.status != "completed" or result.turns != turns + 1:
        raise RuntimeError(f"the scripted run ended {result.status} after {result.turns} turns")
    return AgentResult(name, turns, elapsed / result.turns)
