"""``run_durably_streamed`` and handoffs under ``durable()``, with the SDK's own scripted model
in-process (the crash of a streamed run is in ``test_openai_agents_streamed_crash.py``)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from agents import Agent, Handoff, ModelSettings, function_tool, handoff, set_tracing_disabled
from agents.models.interface import ModelTracing
from agents.testing import ScriptedModel, assistant_message, function_call

from unbroken import ConfigError, open_store
from unbroken.integrations.openai_agents import (
    DurableModel,
    UnbrokenSession,
    current_call,
    durable,
    run_durably_streamed,
)

set_tracing_disabled(True)
PAID: list[str] = []


@function_tool
def pay(account: str, amount: int) -> str:
    """Send money (not idempotent)."""
    key = current_call().idempotency_key  # raises unless run through the durable wrapper
    PAID.append(key)
    return f"sent {amount} to {account}"


def payment_script() -> ScriptedModel:
    return ScriptedModel(
        [[function_call("pay", {"account": "acme", "amount": 40}, call_id="call_0")], [assistant_message("Paid.")]]
    )


def test_a_streamed_run_streams_saves_each_answer_before_its_tools_and_finishes_the_input() -> None:
    PAID.clear()
    session = UnbrokenSession("s", open_store("memory://"))
    agent = durable(Agent(name="clerk", model=payment_script(), tools=[pay]), session)

    async def scenario() -> list[str]:
        result = await run_durably_streamed(agent, "Pay acme 40", session=session)
        kinds: list[str] = [event.type async for event in result.stream_events()]
        assert result.final_output == "Paid."
        return kinds

    kinds = asyncio.run(scenario())
    assert "raw_response_event" in kinds and "run_item_stream_event" in kinds
    assert len(PAID) == 1  # pay ran once, with a key: its answer was saved before it ran
    head = session.log.head()
    assert head.get("running") is None and head.get("answers") == 2
    assert asyncio.run(session.get_items())[0] == {"role": "user", "content": "Pay acme 40"}


def test_a_streamed_request_whose_answer_is_saved_replays_it_without_asking_the_model() -> None:
    session = UnbrokenSession("s", open_store("memory://"))
    first = DurableModel(ScriptedModel([[assistant_message("saved answer")]]), session)
    never = DurableModel(ScriptedModel([]), session)  # an empty script raises if asked

    async def stream(model: DurableModel) -> list[Any]:
        events = model.stream_response(
            "sys", [{"role": "user", "content": "hi"}], ModelSettings(), [], None, [], ModelTracing.DISABLED,
            previous_response_id=None, conversation_id=None, prompt=None,
        )  # fmt: skip
        return [event async for event in events]

    events = asyncio.run(stream(first))
    replayed = asyncio.run(stream(never))
    assert events[-1].type == replayed[-1].type == "response.completed"
    assert replayed[-1].response.output[0].content[0].text == "saved answer"


def clerk_with_cycle() -> tuple[Agent[Any], Agent[Any]]:
    triage = Agent(name="triage", model=ScriptedModel([]), tools=[])
    billing = Agent(name="billing", model=ScriptedModel([]), tools=[pay], handoffs=[triage])
    triage.handoffs = [handoff(billing)]
    return triage, billing


def test_durable_wraps_every_handoff_target_once_even_in_a_cycle() -> None:
    session = UnbrokenSession("s", open_store("memory://"))
    triage, _ = clerk_with_cycle()
    durable_triage = durable(triage, session, effects={"pay": "side_effect"})
    [to_billing] = durable_triage.handoffs
    assert isinstance(to_billing, Handoff) and to_billing._agent_ref is not None
    durable_billing = to_billing._agent_ref()
    assert isinstance(durable_billing, Agent) and isinstance(durable_billing.model, DurableModel)
    assert durable_billing.handoffs == [durable_triage]  # back to the same twin, not a third copy
    assert durable_billing.tools[0] is not pay


def test_a_tool_of_a_handoff_target_runs_through_the_ledger() -> None:
    PAID.clear()
    session = UnbrokenSession("s", open_store("memory://"))
    triage, billing = clerk_with_cycle()
    triage.model = ScriptedModel([[function_call("transfer_to_billing", {}, call_id="call_t")]])
    billing.model = payment_script()

    async def scenario() -> Any:
        result = await run_durably_streamed(durable(triage, session), "Pay acme 40", session=session)
        async for _ in result.stream_events():
            pass
        return result

    result = asyncio.run(scenario())
    assert result.final_output == "Paid." and result.last_agent.name == "billing"
    assert len(PAID) == 1 and [entry.tool for entry in session.store.ledger_list(session.run_id)] == ["pay"]


def test_effects_may_name_a_tool_of_a_handoff_target_but_not_an_unknown_one() -> None:
    session = UnbrokenSession("s", open_store("memory://"))
    triage, _ = clerk_with_cycle()
    durable(triage, session, effects={"pay": "side_effect"})
    with pytest.raises(ConfigError, match="refund"):
        durable(triage, session, effects={"refund": "side_effect"})
