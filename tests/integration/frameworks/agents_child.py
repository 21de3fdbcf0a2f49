"""Child process for the OpenAI Agents SDK crash tests: a durable Agents SDK agent talking to
the local Responses server. Usage: python agents_child.py STORE_URL PROVIDER_URL STATE_DIR [--probe]

``pay`` records its effect in STATE_DIR/effects.jsonl (with its idempotency key) and, while
STATE_DIR/hang exists, stops there so the test can SIGKILL this process inside the tool.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from pathlib import Path

from agents import Agent, OpenAIResponsesModel, function_tool, set_tracing_disabled
from openai import AsyncOpenAI

from unbroken import Found, NotExecuted, ToolCall, open_store
from unbroken.integrations.openai_agents import UnbrokenSession, current_call, durable, run_durably

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


def agent_for(session: UnbrokenSession, provider_url: str, *, probe: bool) -> Agent[None]:
    """The clerk agent, made durable on ``session``, talking to the local Responses server."""
    set_tracing_disabled(True)
    client = AsyncOpenAI(base_url=provider_url + "/v1", api_key="test-key", max_retries=0)
    agent = Agent(
        name="clerk", instructions="Pay.", tools=[balance, pay], model=OpenAIResponsesModel("gpt-test", client)
    )
    probes = {"pay": payment_made} if probe else {}
    return durable(agent, session, effects={"balance": "read_only", "pay": "side_effect"}, probes=probes)


async def run(store_url: str, provider_url: str, state: Path, probe: bool) -> str:
    """Run (or resume) the payment conversation; returns the agent's final output."""
    global STATE
    STATE = state
    session = UnbrokenSession("pay-acme", open_store(store_url))
    agent = agent_for(session, provider_url, probe=probe)
    result = await run_durably(agent, "Pay acme 40", session=session)
    return str(result.final_output)


if __name__ == "__main__":
    output = asyncio.run(run(sys.argv[1], sys.argv[2], Path(sys.argv[3]), "--probe" in sys.argv))
    print(json.dumps({"output": output}))
