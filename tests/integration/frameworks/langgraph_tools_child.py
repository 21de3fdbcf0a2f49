"""A LangGraph ToolNode graph on ``UnbrokenSaver`` whose model node asks a local Chat Completions
server through the real ``openai`` client, and whose ``buy`` tool runs through
``durable_tool_node``. Used in-process by the tests and as a child process for the crash test.

Usage: python langgraph_tools_child.py STORE_URL PROVIDER_URL STATE_DIR TASK

As a child, ``buy`` records each charge (with its idempotency key) in STATE_DIR/effects.jsonl
and, while STATE_DIR/hang exists, stops right after, so the test can SIGKILL it inside the tool.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import tools_condition
from openai import OpenAI

from unbroken import Found, NotExecuted, ToolCall, open_store
from unbroken.integrations.langgraph import UnbrokenSaver, current_call, durable_tool_node
from unbroken.stores.base import Store

CONFIG: Any = {"configurable": {"thread_id": "shopper"}}


def as_openai(message: AnyMessage) -> dict[str, Any]:
    if isinstance(message, HumanMessage):
        return {"role": "user", "content": message.content}
    if isinstance(message, ToolMessage):
        return {"role": "tool", "tool_call_id": message.tool_call_id, "content": message.content}
    made = getattr(message, "tool_calls", [])
    calls = [
        {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": json.dumps(c["args"])}}
        for c in made
    ]
    return {"role": "assistant", "content": message.content or None, **({"tool_calls": calls} if calls else {})}


def shop_graph(
    store: Store, provider_url: str, charge: Callable[[str, str], str], probe: Callable[[ToolCall], Any] | None = None
) -> Any:
    """The graph: model -> tools (``buy``, a side effect) -> model ..., checkpointed in ``store``.
    ``charge(item, idempotency_key)`` is what ``buy`` does."""
    client = OpenAI(base_url=provider_url + "/v1", api_key="test-key", max_retries=0)

    @tool
    def buy(item: str) -> str:
        """Charge the card for an item (not idempotent)."""
        return charge(item, current_call().idempotency_key)

    def model(state: MessagesState) -> dict[str, list[AnyMessage]]:
        messages: Any = [as_openai(m) for m in state["messages"]]
        reply = client.chat.completions.create(model="gpt-test", messages=messages).choices[0].message
        calls = [
            {"id": c.id, "name": c.function.name, "args": json.loads(c.function.arguments)}
            for c in reply.tool_calls or []
            if c.type == "function"
        ]
        return {"messages": [AIMessage(content=reply.content or "", tool_calls=calls)]}

    probes = {"buy": probe} if probe is not None else {}
    builder = StateGraph(MessagesState)
    builder.add_node("model", model)
    builder.add_node("tools", durable_tool_node([buy], store, effects={"buy": "side_effect"}, probes=probes))
    builder.add_edge(START, "model")
    builder.add_conditional_edges("model", tools_condition)
    builder.add_edge("tools", "model")
    return builder.compile(checkpointer=UnbrokenSaver(store))


def recorded(state_dir: Path) -> list[dict[str, Any]]:
    path = state_dir / "effects.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def charging_into(state_dir: Path) -> Callable[[str, str], str]:
    def charge(item: str, key: str) -> str:
        with open(state_dir / "effects.jsonl", "a") as f:
            f.write(json.dumps({"item": item, "key": key, "pid": os.getpid()}) + "\n")
            f.flush()
            os.fsync(f.fileno())
        while (state_dir / "hang").exists():
            time.sleep(0.05)
        return f"charged for {item} (receipt {key})"

    return charge


def charge_found(state_dir: Path) -> Callable[[ToolCall], Found | NotExecuted]:
    def probe(call: ToolCall) -> Found | NotExecuted:
        for effect in recorded(state_dir):
            if effect["key"] == call.idempotency_key:
                return Found(f"charged for {effect['item']} (receipt {effect['key']})")
        return NotExecuted()

    return probe


if __name__ == "__main__":
    store_url, provider_url, state_dir, task = sys.argv[1], sys.argv[2], Path(sys.argv[3]), sys.argv[4]
    with open_store(store_url) as opened:
        graph = shop_graph(opened, provider_url, charging_into(state_dir), charge_found(state_dir))
        graph.invoke({"messages": [HumanMessage(task)]}, CONFIG, durability="sync")
