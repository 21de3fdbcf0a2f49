"""Agents for ``unbroken chaos`` written the way a hurried user writes them (loaded by path)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from unbroken import Agent, ScriptedModel, Store, ToolCall, tool

USAGE = {"input_tokens": 90, "output_tokens": 30}


@tool(effect="idempotent")
def send_invoice(customer: str, *, call: ToolCall) -> str:
    """Send an invoice. Declared idempotent; it LOGS the key but never deduplicates by it."""
    world = Path(os.environ.get("UNBROKEN_CHAOS_DIR") or ".")
    line = json.dumps({"customer": customer, "logged_key": call.idempotency_key}) + "\n"
    fd = os.open(world / "invoices", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)
    return f"invoice sent to {customer}"


def make_key_logging_agent(store: Store) -> Agent:
    script = [
        {
            "content": [{"type": "tool_use", "id": "toolu_i1", "name": "send_invoice", "input": {"customer": "acme"}}],
            "stop_reason": "tool_use",
            "usage": dict(USAGE),
        },
        {"content": [{"type": "text", "text": "Invoiced."}], "stop_reason": "end_turn", "usage": dict(USAGE)},
    ]
    return Agent(ScriptedModel(script), [send_invoice], store, max_turns=5)
