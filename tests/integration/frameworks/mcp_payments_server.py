"""A small MCP server for the integration tests (the official ``mcp`` package).

Usage: python mcp_payments_server.py STATE_DIR stdio|http [PORT]

Every effect is appended to STATE_DIR/effects.jsonl (fsynced) with the idempotency key it
arrived with. While STATE_DIR/hang exists, ``send_payment`` stops right after recording its
effect, so the test can kill the agent inside the destructive tool. While STATE_DIR/down
exists, the server exits at start (a server that stays down).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any, cast

if __name__ == "__main__" and (Path(sys.argv[1]) / "down").exists():
    sys.exit(1)  # before importing mcp: a server that stays down fails fast

from mcp.server.mcpserver import Context, MCPServer
from mcp.types import ToolAnnotations

STATE = Path(sys.argv[1])
KEY = "unbroken/idempotency_key"
app = MCPServer("payments", log_level="WARNING")


def key_of(ctx: Context) -> str | None:
    meta = ctx.request_context.meta or {}
    return cast("str | None", meta.get(KEY))


def effects() -> list[dict[str, Any]]:
    path = STATE / "effects.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def record(entry: dict[str, Any]) -> None:
    with open(STATE / "effects.jsonl", "a") as f:
        f.write(json.dumps(entry) + "\n")
        f.flush()
        os.fsync(f.fileno())


@app.tool(annotations=ToolAnnotations(read_only_hint=True))
def get_balance(account: str) -> str:
    """Read an account's balance."""
    paid = sum(e["amount"] for e in effects() if e["tool"] == "send_payment" and e["account"] == account)
    return f"{account}: {1000 - paid}"


@app.tool(annotations=ToolAnnotations(read_only_hint=False, idempotent_hint=True, destructive_hint=False))
def set_limit(account: str, limit: int, ctx: Context) -> str:
    """Set an account's daily limit (the same key twice changes nothing)."""
    key = key_of(ctx)
    if not any(e["key"] == key for e in effects()):
        record({"tool": "set_limit", "key": key, "account": account, "amount": limit, "pid": os.getpid()})
    return f"limit of {account} is {limit}"


@app.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True))
def send_payment(account: str, amount: int, ctx: Context) -> str:
    """Send money. Not idempotent."""
    key = key_of(ctx)
    record({"tool": "send_payment", "key": key, "account": account, "amount": amount, "pid": os.getpid()})
    while (STATE / "hang").exists():
        time.sleep(0.05)
    return f"sent {amount} to {account} (receipt {key})"


@app.tool(annotations=ToolAnnotations(read_only_hint=True))
def find_payment(key: str) -> str:
    """The receipt of the payment made under an idempotency key, or 'none'."""
    for entry in effects():
        if entry["tool"] == "send_payment" and entry["key"] == key:
            return f"sent {entry['amount']} to {entry['account']} (receipt {key})"
    return "none"


@app.tool()
def show_meta(ctx: Context) -> str:
    """Echo the request's unbroken metadata (no annotations: a side effect by default)."""
    meta = ctx.request_context.meta or {}
    return json.dumps({k: v for k, v in meta.items() if k.startswith("unbroken/")})


@app.tool(annotations=ToolAnnotations(read_only_hint=True))
def server_pid() -> int:
    """This server process's id (the tests kill it)."""
    return os.getpid()


def refund(account: str, amount: int) -> str:
    """Refund a payment (offered only after enable_refunds)."""
    return f"refunded {amount} to {account}"


@app.tool(annotations=ToolAnnotations(read_only_hint=False, idempotent_hint=True, destructive_hint=False))
async def enable_refunds(ctx: Context) -> str:
    """Offer the refund tool from now on (the tool list changes)."""
    app.add_tool(refund)
    await ctx.notify_tools_changed()
    return "refunds enabled"


@app.resource("payments://effects", mime_type="application/json")
def effects_resource() -> str:
    """Every effect the server recorded."""
    return json.dumps(effects())


@app.prompt()
def pay_invoice(account: str) -> str:
    """Ask the agent to pay an account's open invoice."""
    return f"Pay the open invoice of {account}, once."


@app.tool(name="audit.log", annotations=ToolAnnotations(read_only_hint=True))
def audit_log() -> str:
    """A tool whose MCP name is not a valid unbroken tool name."""
    return "[]"


if __name__ == "__main__":
    if sys.argv[2] == "stdio":
        app.run("stdio")
    else:
        app.run("streamable-http", host="127.0.0.1", port=int(sys.argv[3]))
