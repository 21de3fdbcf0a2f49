"""A local OpenAI-compatible server that numbers its tool calls ``call_0`` in every answer (as
local servers do) and two purchases in one session: each integration keys a call by its
occurrence, not by the provider's id, so there are two charges, each answered with its own
result (issue 21)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from provider_server import ProviderServer, Reply, _chat_call, _function_call, chat_completion, response_body

from unbroken import open_store
from unbroken.integrations.openai_agents import UnbrokenSession, current_call, durable, run_durably

PURCHASES = ["Buy a lamp", "Buy a chair"]


class Shop:
    """The service the tool charges: one charge per call that reached it."""

    def __init__(self) -> None:
        self.charges: list[tuple[str, str]] = []

    def charge(self, item: str, key: str) -> str:
        self.charges.append((item, key))
        return f"charged for {item} (charge {len(self.charges)})"


def buy_call(text: str) -> tuple[str, str]:
    """The call the model makes for "Buy a lamp": ``buy`` with ``{"item": "lamp"}``."""
    return "buy", json.dumps({"item": text.removeprefix("Buy a ").strip()})


def payment_call(text: str) -> tuple[str, str]:
    """The call for the MCP server's ``send_payment``: the item is the account paid."""
    return "send_payment", json.dumps({"account": text.removeprefix("Buy a ").strip(), "amount": 40})


def responses_reusing_call_0(path: str, body: dict[str, Any]) -> Reply:
    """Responses API: a user message gets ``buy`` as call ``call_0``; a tool output gets a final message."""
    last = body["input"][-1]
    if last.get("type") == "function_call_output":
        text = f"Done: {last['output']}"
        message = {"type": "message", "id": "msg_0", "role": "assistant", "status": "completed",
                   "content": [{"type": "output_text", "text": text, "annotations": []}]}  # fmt: skip
        return 200, response_body([message]), {}
    content = last["content"] if isinstance(last["content"], str) else last["content"][0]["text"]
    return 200, response_body([_function_call("fc_0", "call_0", *buy_call(content))]), {}


def chat_reusing_call_0(path: str, body: dict[str, Any], make_call: Any = buy_call) -> Reply:
    """Chat Completions: the same, with ``tool_calls`` and ``tool`` messages."""
    last = body["messages"][-1]
    if last["role"] == "tool":
        final = {"role": "assistant", "content": f"Done: {last['content']}", "refusal": None}
        return 200, chat_completion(final, "stop"), {}
    content = last["content"] if isinstance(last["content"], str) else last["content"][0]["text"]
    calls = [_chat_call("call_0", *make_call(content))]
    asking: dict[str, Any] = {"role": "assistant", "content": None, "refusal": None, "tool_calls": calls}
    return 200, chat_completion(asking, "tool_calls"), {}


@pytest.fixture
def server() -> Iterator[ProviderServer]:
    running = ProviderServer().start()
    try:
        yield running
    finally:
        running.stop()


@pytest.mark.parametrize("api", ["responses", "chat"])
def test_agents_sdk_two_purchases_with_reused_call_ids_are_two_charges(
    tmp_path: Path, server: ProviderServer, api: str
) -> None:
    from agents import Agent, OpenAIChatCompletionsModel, OpenAIResponsesModel, function_tool, set_tracing_disabled
    from openai import AsyncOpenAI

    set_tracing_disabled(True)
    server.responder = responses_reusing_call_0 if api == "responses" else chat_reusing_call_0
    shop = Shop()

    @function_tool
    def buy(item: str) -> str:
        """Charge the card for an item (not idempotent)."""
        return shop.charge(item, current_call().idempotency_key)

    client = AsyncOpenAI(base_url=server.url + "/v1", api_key="test-key", max_retries=0)
    model: Any = (OpenAIResponsesModel if api == "responses" else OpenAIChatCompletionsModel)("gpt-test", client)
    store = open_store(f"sqlite:///{tmp_path / 'runs.db'}")
    session = UnbrokenSession("shopper", store)
    agent = durable(Agent(name="clerk", tools=[buy], model=model), session, effects={"buy": "side_effect"})

    async def shop_twice() -> list[str]:
        return [str((await run_durably(agent, task, session=session)).final_output) for task in PURCHASES]

    outputs = asyncio.run(shop_twice())
    store.close()

    assert [item for item, _ in shop.charges] == ["lamp", "chair"]
    assert len({key for _, key in shop.charges}) == 2
    assert outputs == ["Done: charged for lamp (charge 1)", "Done: charged for chair (charge 2)"]


def test_mcp_tools_two_purchases_with_reused_call_ids_are_two_charges(tmp_path: Path, server: ProviderServer) -> None:
    """An unbroken agent on the Chat Completions adapter, its tools from a real MCP server over
    stdio: the engine keys each call by its occurrence, and the server gets two payments, each
    with its own idempotency key, each answered with its own receipt."""
    from crash_helpers import effects
    from mcp_agent_child import stdio_server
    from provider_agents import build_model

    from unbroken import Agent
    from unbroken.integrations.mcp import MCPTools

    server.responder = lambda path, body: chat_reusing_call_0(path, body, payment_call)
    state = tmp_path / "state"
    state.mkdir()
    with (
        MCPTools(stdio_server(str(state)), include=["send_payment"]) as connection,
        open_store(f"sqlite:///{tmp_path / 'runs.db'}") as store,
    ):
        agent = Agent(model=build_model("openai-chat", server.url), tools=connection.tools, store=store)
        outputs = [agent.send("shopper", task, create=True).output for task in PURCHASES]

    paid = effects(state)
    assert [(e["account"], e["amount"]) for e in paid] == [("lamp", 40), ("chair", 40)]
    assert len({e["key"] for e in paid}) == 2
    assert outputs == [f"Done: sent 40 to {e['account']} (receipt {e['key']})" for e in paid]


def test_langgraph_tool_node_two_purchases_with_reused_call_ids_are_two_charges(
    tmp_path: Path, server: ProviderServer
) -> None:
    """A ToolNode graph checkpointed by ``UnbrokenSaver``, its model node asking the local Chat
    Completions server through the real ``openai`` client, its tools wrapped by
    ``durable_tool_node``: two tasks on one thread, both answered with ``call_0``."""
    from langchain_core.messages import HumanMessage
    from langgraph_tools_child import CONFIG, shop_graph

    server.responder = chat_reusing_call_0
    shop = Shop()
    store = open_store(f"sqlite:///{tmp_path / 'runs.db'}")
    graph = shop_graph(store, server.url, shop.charge)
    outputs = [graph.invoke({"messages": [HumanMessage(task)]}, CONFIG)["messages"][-1].content for task in PURCHASES]
    ledger = store.ledger_list("langgraph.shopper")
    store.close()

    assert [item for item, _ in shop.charges] == ["lamp", "chair"]
    assert len({key for _, key in shop.charges}) == 2
    assert sorted(e.key for e in ledger) == sorted(key for _, key in shop.charges)
    assert outputs == ["Done: charged for lamp (charge 1)", "Done: charged for chair (charge 2)"]


def test_langgraph_a_purchase_killed_inside_the_tool_keeps_its_key_and_is_not_charged_again(
    tmp_path: Path, server: ProviderServer
) -> None:
    """The key is the call's occurrence, so a fresh process resuming the graph derives the same
    key: the probe finds the charge the killed process made under it, and nothing is charged
    twice. The thread's first purchase (also ``call_0``) was settled before, in this process."""
    from crash_helpers import effects, kill_once_effect_recorded, start
    from langchain_core.messages import HumanMessage
    from langgraph_tools_child import CONFIG, charge_found, charging_into, shop_graph

    server.responder = chat_reusing_call_0
    url, state = f"sqlite:///{tmp_path / 'runs.db'}", tmp_path / "state"
    state.mkdir()
    shop = Shop()
    with open_store(url) as store:
        shop_graph(store, server.url, shop.charge).invoke({"messages": [HumanMessage(PURCHASES[0])]}, CONFIG)
    (state / "hang").touch()
    child = str(Path(__file__).with_name("langgraph_tools_child.py"))
    killed_in = kill_once_effect_recorded(start([child, url, server.url, str(state), PURCHASES[1]]), state)
    (state / "hang").unlink()

    with open_store(url) as store:
        graph = shop_graph(store, server.url, charging_into(state), charge_found(state))
        output = graph.invoke(None, CONFIG)["messages"][-1].content
        ledger = {e.key: e.status for e in store.ledger_list("langgraph.shopper")}

    assert [item for item, _ in shop.charges] == ["lamp"]
    assert [e["item"] for e in effects(state)] == ["chair"]  # charged once, by the killed process
    assert output == f"Done: charged for chair (receipt {killed_in['key']})"
    assert ledger == {shop.charges[0][1]: "succeeded", killed_in["key"]: "succeeded"}


def test_agents_sdk_an_answer_saved_before_answers_were_numbered_keeps_its_old_key(tmp_path: Path) -> None:
    """A run interrupted across the upgrade: its saved answer has no number, and its calls keep
    the key they were claimed under (run and call id), so the resumed call finds its entry."""
    from unbroken.errors import ConfigError
    from unbroken.integrations.openai_agents import call_key
    from unbroken.state import idempotency_key, occurrence_key

    item = _function_call("fc_0", "call_0", "buy", '{"item": "lamp"}')
    with open_store(f"sqlite:///{tmp_path / 'runs.db'}") as store:
        session = UnbrokenSession("shopper", store)
        session._set_head(model_answer={"request": "r", "response": {"output": [item]}})
        assert call_key(session, "call_0", "buy", '{"item": "lamp"}') == idempotency_key(session.run_id, "call_0")
        session._set_head(model_answer={"request": "r", "response": {"output": [item]}, "number": 3}, answers=3)
        assert call_key(session, "call_0", "buy", '{"item": "lamp"}') == occurrence_key(session.run_id, 3, 0, "call_0")
        with pytest.raises(ConfigError, match="not in the model answer"):
            call_key(session, "call_0", "buy", '{"item": "chair"}')


def test_agents_sdk_a_durable_tool_with_no_saved_answer_refuses_and_charges_nothing(
    tmp_path: Path, server: ProviderServer
) -> None:
    """The durable agent's model swapped for a plain one (``clone(model=...)``): no answer is
    saved before the tools run, so the call has no durable key. A key from the provider's id
    alone (``call_0`` in every answer here) would make the second purchase reuse the first's
    ledger entry and answer "charged for lamp" without charging; the tool refuses instead."""
    from agents import Agent, OpenAIResponsesModel, function_tool, set_tracing_disabled
    from agents.exceptions import UserError
    from openai import AsyncOpenAI

    from unbroken.errors import ConfigError

    set_tracing_disabled(True)
    server.responder = responses_reusing_call_0
    shop = Shop()

    @function_tool
    def buy(item: str) -> str:
        """Charge the card for an item (not idempotent)."""
        return shop.charge(item, current_call().idempotency_key)

    client = AsyncOpenAI(base_url=server.url + "/v1", api_key="test-key", max_retries=0)
    store = open_store(f"sqlite:///{tmp_path / 'runs.db'}")
    session = UnbrokenSession("shopper", store)
    wrapped = durable(Agent(name="clerk", tools=[buy], model=OpenAIResponsesModel("gpt-test", client)), session)
    agent = wrapped.clone(model=OpenAIResponsesModel("gpt-test", client))  # answers no longer saved

    with pytest.raises(UserError, match="no model answer saved for session 'shopper'") as refused:
        asyncio.run(run_durably(agent, PURCHASES[0], session=session))  # the SDK wraps a tool's error
    ledger = store.ledger_list(session.run_id)
    store.close()

    assert isinstance(refused.value.__cause__, ConfigError)
    assert "nothing was run" in str(refused.value)
    assert shop.charges == [] and ledger == []


def test_agents_sdk_a_session_whose_saves_the_store_lost_is_refused_not_started_over(
    tmp_path: Path, server: ProviderServer
) -> None:
    """The session bought a lamp; the store then lost the session's saves but kept its effect
    ledger (a partial loss). A new process running the same input would start the session from
    nothing and buy the lamp again; it gets ``StoreDataLost`` instead, and nothing is charged."""
    from agents import Agent, OpenAIResponsesModel, function_tool, set_tracing_disabled
    from openai import AsyncOpenAI

    from unbroken.errors import StoreDataLost

    set_tracing_disabled(True)
    server.responder = responses_reusing_call_0
    shop = Shop()

    @function_tool
    def buy(item: str) -> str:
        """Charge the card for an item (not idempotent)."""
        return shop.charge(item, current_call().idempotency_key)

    client = AsyncOpenAI(base_url=server.url + "/v1", api_key="test-key", max_retries=0)
    store = open_store(f"sqlite:///{tmp_path / 'runs.db'}")

    def shop_once() -> str:
        session = UnbrokenSession("shopper", store)  # a new handle: as a new process would open it
        agent = durable(Agent(name="clerk", tools=[buy], model=OpenAIResponsesModel("gpt-test", client)), session)
        return str(asyncio.run(run_durably(agent, PURCHASES[0], session=session)).final_output)

    assert shop_once() == "Done: charged for lamp (charge 1)"
    run_id = UnbrokenSession("shopper", store).run_id
    entries = store.ledger_list(run_id)
    store.delete_run(run_id)
    for entry in entries:  # the store kept the ledger and lost the saves
        store.ledger_put(entry)

    with pytest.raises(StoreDataLost, match="effect ledger holds 1 entry"):
        shop_once()
    store.close()

    assert [item for item, _ in shop.charges] == ["lamp"]
