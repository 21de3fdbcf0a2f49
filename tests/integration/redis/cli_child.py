"""Child process of the CLI tests: starts run r1 (one email, then done) on the store at argv[1];
the parent arms it to SIGKILL itself right after the email went out."""

from __future__ import annotations

import sys
from typing import Any

from unbroken import Agent, ScriptedModel, open_store, tool

TASK = "email the customer"
FINAL: dict[str, Any] = {"content": [{"type": "text", "text": "done"}], "stop_reason": "end_turn", "usage": {}}
SEND: dict[str, Any] = {
    "content": [{"type": "tool_use", "id": "c1", "name": "send", "input": {"to": "x"}}],
    "usage": {},
}


@tool(effect="side_effect")
def send(to: str) -> str:
    """Send an email."""
    return "sent"


def build(url: str, *, unknown_policy: str = "tell_model") -> Agent:
    return Agent(ScriptedModel([SEND, FINAL]), [send], open_store(url), unknown_policy=unknown_policy)  # type: ignore[arg-type]


if __name__ == "__main__":
    build(sys.argv[1]).run(TASK, run_id="r1")
