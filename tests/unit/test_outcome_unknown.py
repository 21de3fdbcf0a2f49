"""A tool that raises ``OutcomeUnknown`` (it cannot tell whether it acted: a connection broke
mid-call) is settled by the run's ``unknown_policy``, never recorded as a plain failure."""

from __future__ import annotations

import asyncio

import pytest

from unbroken import Agent, ScriptedModel, Tool, open_store, ops, tool
from unbroken.errors import OutcomeUnknown
from unbroken.state import Effect

USAGE = {"input_tokens": 1, "output_tokens": 1}
CALL = {"type": "tool_use", "id": "toolu_1", "name": "pay", "input": {}}
SCRIPT = [
    {"content": [CALL], "stop_reason": "tool_use", "usage": USAGE},
    {"content": [{"type": "text", "text": "done"}], "stop_reason": "end_turn", "usage": USAGE},
]


def pay_tool(effect: Effect) -> Tool:
    def pay() -> str:
        """Pay."""
        raise OutcomeUnknown("the connection to the payment service broke after the request was sent")

    return tool(effect=effect)(pay)


@pytest.mark.parametrize("driver", ["run", "arun"])
def test_a_side_effect_that_cannot_tell_pauses_the_run_under_the_pause_policy(driver: str) -> None:
    store = open_store("memory://")
    agent = Agent(model=ScriptedModel(SCRIPT), tools=[pay_tool("side_effect")], store=store, unknown_policy="pause")
    result = agent.run("pay", run_id="r") if driver == "run" else asyncio.run(agent.arun("pay", run_id="r"))
    assert result.status == "paused"
    [entry] = store.ledger_list("r")
    assert entry.status == "unknown"
    [[note]] = ops.settlements(store, "r").values()  # what `unbroken history` tells the operator
    assert "outcome UNKNOWN (the connection to the payment service broke" in note and "paused" in note


def test_under_tell_model_the_model_is_told_unknown_outcome_with_the_reason() -> None:
    store = open_store("memory://")
    agent = Agent(model=ScriptedModel(SCRIPT), tools=[pay_tool("side_effect")], store=store)
    result = agent.run("pay", run_id="r")
    assert result.status == "completed"
    text = str(store.load("r").messages)
    assert "UNKNOWN OUTCOME" in text and "connection to the payment service broke" in text


def test_a_read_only_tool_that_cannot_tell_just_failed() -> None:
    store = open_store("memory://")
    agent = Agent(model=ScriptedModel(SCRIPT), tools=[pay_tool("read_only")], store=store, unknown_policy="pause")
    assert agent.run("pay", run_id="r").status == "completed"
