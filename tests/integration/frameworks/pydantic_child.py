"""A Pydantic AI agent run through ``run_durably`` in a process of its own: a scripted model
(``FunctionModel``) pays twice, reusing the call id ``call_0`` as local servers do, then ends.
``charge`` records each payment in a journal (the outside service) and kills its own process
(SIGKILL) right after the payment when ``KILL_AFTER_PAYMENT`` names that payment's number.

argv: store URL, journal path, run id, "probe" or "no-probe"."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path

from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from unbroken import Found, NotExecuted, ToolCall, open_store
from unbroken.integrations.pydantic_ai import current_call, run_durably

url, journal_path, run_id, with_probe = sys.argv[1], Path(sys.argv[2]), sys.argv[3], sys.argv[4] == "probe"


def journal() -> list[dict[str, object]]:
    if not journal_path.exists():
        return []
    return [json.loads(line) for line in journal_path.read_text().splitlines()]


def script(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    answered = sum(isinstance(part, ToolReturnPart) for message in messages for part in message.parts)
    if answered == 0:
        return ModelResponse(parts=[ToolCallPart("charge", {"amount": 5}, tool_call_id="call_0")])
    if answered == 1:
        return ModelResponse(parts=[ToolCallPart("charge", {"amount": 7}, tool_call_id="call_0")])
    return ModelResponse(parts=[TextPart("done")])


agent = Agent(FunctionModel(script))


@agent.tool_plain
def charge(amount: int) -> str:
    """Charge the card."""
    key = current_call().idempotency_key
    with journal_path.open("a") as out:
        out.write(json.dumps({"amount": amount, "key": key}) + "\n")
        out.flush()
        os.fsync(out.fileno())
    if os.environ.get("KILL_AFTER_PAYMENT") == str(len(journal())):
        os.kill(os.getpid(), signal.SIGKILL)
    return f"charged {amount}"


def charged(call: ToolCall) -> Found | NotExecuted:
    for payment in journal():
        if payment["key"] == call.idempotency_key:
            return Found(f"charged {payment['amount']}")
    return NotExecuted()


async def main() -> None:
    result = await run_durably(
        agent,
        "Pay the two invoices",
        run_id=run_id,
        store=open_store(url),
        probes={"charge": charged} if with_probe else {},
    )
    print(json.dumps({"output": result.output, "resumed": result.resumed}))


asyncio.run(main())
