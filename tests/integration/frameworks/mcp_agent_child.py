"""Child process for the MCP crash tests: an unbroken agent whose tools come from the test
MCP server. Usage: python mcp_agent_child.py STORE_URL STATE_DIR stdio|URL [--probe]

Prints the run's result as JSON. The scripted model reads a balance, sends one payment, and
finishes.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from mcp import StdioServerParameters

from unbroken import Agent, Found, NotExecuted, ScriptedModel, ToolCall, open_store
from unbroken.integrations.mcp import MCPTools

SERVER = str(Path(__file__).with_name("mcp_payments_server.py"))
USAGE = {"input_tokens": 10, "output_tokens": 5}


def turn(call_id: str, name: str, arguments: dict[str, object]) -> dict[str, object]:
    block = {"type": "tool_use", "id": call_id, "name": name, "input": arguments}
    return {"content": [{"type": "text", "text": "working"}, block], "stop_reason": "tool_use", "usage": USAGE}


SCRIPT: list[dict[str, object]] = [
    turn("toolu_1", "get_balance", {"account": "acme"}),
    turn("toolu_2", "send_payment", {"account": "acme", "amount": 40}),
    turn("toolu_3", "get_balance", {"account": "acme"}),
    {"content": [{"type": "text", "text": "Paid."}], "stop_reason": "end_turn", "usage": USAGE},
]


def stdio_server(state_dir: str) -> StdioServerParameters:
    return StdioServerParameters(command=sys.executable, args=[SERVER, state_dir, "stdio"])


def run(store_url: str, state_dir: str, where: str, probe: bool) -> dict[str, object]:
    """Run (or resume) the payment run; ``where`` is "stdio" or the server's URL."""
    server = stdio_server(state_dir) if where == "stdio" else where
    probes = {}
    connection: MCPTools

    def payment_made(call: ToolCall) -> Found | NotExecuted:
        receipt = connection.call("find_payment", {"key": call.idempotency_key})
        return NotExecuted() if receipt == "none" else Found(receipt)

    if probe:
        probes["send_payment"] = payment_made
    with MCPTools(server, probes=probes, include=["get_balance", "send_payment"]) as connection:
        agent = Agent(model=ScriptedModel(SCRIPT), tools=connection.tools, store=open_store(store_url))
        result = agent.run("Pay acme 40", run_id="pay-acme")
    return {"status": result.status, "output": result.output, "resumed": result.resumed}


if __name__ == "__main__":
    print(json.dumps(run(sys.argv[1], sys.argv[2], sys.argv[3], "--probe" in sys.argv)))
