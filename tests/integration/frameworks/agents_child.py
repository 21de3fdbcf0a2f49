"""Child process for the OpenAI Agents SDK crash tests: a durable Agents SDK agent talking to
the local Responses server. Usage: python agents_child.py STORE_URL PROVIDER_URL STATE_DIR [--probe] [--streamed]

``--streamed`` runs it with ``run_durably_streamed`` (the local server answers whole; the
model wrapper below turns each answer into stream events, as a streaming server would).

``pay`` records its effect in STATE_DIR/effects.jsonl (with its idempotency key) and, while
STATE_DIR/hang exists, stops there so the test can SIGKILL this process inside the tool.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from agents import Agent, OpenAIResponsesModel, function_tool, set_tracing_disabled
from agents.items import ModelResponse
from agents.models.interface import Model
from openai import AsyncOpenAI
from openai.types.responses import Response, ResponseCompletedEvent, ResponseOutputItemDoneEvent

from unbroken import Found, NotExecuted, ToolCall, open_store
from unbroken.integrations.openai_agents import (
    UnbrokenSession,
    current_call,
    durable,
    run_durably,
    run_durably_streamed,
)

STATE = Path(".")


def recorded() -> list[dict[str, object]]:
    path = STATE / "effects.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@function_tool
def balance(account: str) -> str:
    """Read an account's balance."""
    return f"{account}: {1000 - sum(int(str(e['amount'])) for e in recorded())}"


@function_tool
def pay(account: str, amount: int) -> str:
    """Send money (not idempotent)."""
    key = current_call().idempotency_key
    with open(STATE / "effects.jsonl", "a") as f:
        f.write(json.dumps({"key": key, "account": account, "amount": amount, "pid": os.getpid()}) + "\n")
        f.flush()
        os.fsync(f.fileno())
    while (STATE / "hang").exists():
        time.sleep(0.05)
    return f"sent {amount} to {account} (receipt {key})"


def payment_made(call: ToolCall) -> Found | NotExecuted:
    for effect in recorded():
        if effect["key"] == call.idempotency_key:
            return Found(f"sent {effect['amount']} to {effect['account']} (receipt {call.idempotency_key})")
    return NotExecuted()


class StreamedWhole(Model):
    """Streams the inner model's whole answer: one ``output_item.done`` event per item, then a
    ``response.completed`` whose output is empty (as some streaming backends send it)."""

    def __init__(self, inner: Model) -> None:
        self.inner = inner

    async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
        return await self.inner.get_response(*args, **kwargs)

    async def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        answer = await self.inner.get_response(*args, **kwargs)
        for n, item in enumerate(answer.output):
            yield ResponseOutputItemDoneEvent(
                type="response.output_item.done", item=item, output_index=n, sequence_number=n
            )
        response = Response(
            id=answer.response_id or "resp", created_at=0, model="gpt-test", object="response", output=[],
            tool_choice="auto", tools=[], parallel_tool_calls=False, status="completed",
        )  # fmt: skip
        yield ResponseCompletedEvent(type="response.completed", response=response, sequence_number=len(answer.output))


def agent_for(session: UnbrokenSession, provider_url: str, *, probe: bool, streamed: bool = False) -> Agent[None]:
    """The clerk agent, made durable on ``session``, talking to the local Responses server."""
    set_tracing_disabled(True)
    client = AsyncOpenAI(base_url=provider_url + "/v1", api_key="test-key", max_retries=0)
    model: Model = OpenAIResponsesModel("gpt-test", client)
    agent = Agent(
        name="clerk", instructions="Pay.", tools=[balance, pay], model=StreamedWhole(model) if streamed else model
    )
    probes = {"pay": payment_made} if probe else {}
    return durable(agent, session, effects={"balance": "read_only", "pay": "side_effect"}, probes=probes)


async def run(store_url: str, provider_url: str, state: Path, probe: bool, streamed: bool = False) -> str:
    """Run (or resume) the payment conversation; returns the agent's final output."""
    global STATE
    STATE = state
    session = UnbrokenSession("pay-acme", open_store(store_url))
    agent = agent_for(session, provider_url, probe=probe, streamed=streamed)
    if not streamed:
        result = await run_durably(agent, "Pay acme 40", session=session)
        return str(result.final_output)
    streaming = await run_durably_streamed(agent, "Pay acme 40", session=session)
    async for _ in streaming.stream_events():
        pass
    return str(streaming.final_output)


if __name__ == "__main__":
    flags = {"probe": "--probe" in sys.argv, "streamed": "--streamed" in sys.argv}
    output = asyncio.run(run(sys.argv[1], sys.argv[2], Path(sys.argv[3]), **flags))
    print(json.dumps({"output": output}))
