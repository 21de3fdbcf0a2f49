"""A small agent for the CLI tests: one side-effecting call (no probe), then a final answer.

``make_agent()`` is the zero-argument factory ``unbroken resume --agent cli_agents:make_agent``
uses; it reads its store URL and outbox directory from the environment. Run as a script, it
starts the run (the crash tests arm ``UNBROKEN_CRASH_AT`` and SIGKILL it).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from unbroken import Agent, ScriptedModel, Store, ToolCall, open_store, tool

STORE_ENV = "UNBROKEN_CLI_TEST_STORE"
OUTBOX_ENV = "UNBROKEN_CLI_TEST_OUTBOX"
RUN_ID = "notify"
TASK = "Tell Ann her order shipped"
CALL_ID = "toolu_send_1"
USAGE = {"input_tokens": 900, "output_tokens": 60, "cache_read_input_tokens": 40}
TOKENS_PER_TURN = 1000

SEND_TURN: dict[str, Any] = {
    "content": [
        {"type": "thinking", "thinking": "Send it.", "signature": "c2lnbmF0dXJlLTE="},
        {"type": "text", "text": "Sending the notice."},
        {"type": "tool_use", "id": CALL_ID, "name": "send_notice", "input": {"to": "ann@example.com"}},
    ],
    "stop_reason": "tool_use",
    "usage": USAGE,
}
FINAL_TURN: dict[str, Any] = {
    "content": [{"type": "text", "text": "Ann has been told."}],
    "stop_reason": "end_turn",
    "usage": USAGE,
}
FULL_SCRIPT = [SEND_TURN, FINAL_TURN]


def sends(outbox: Path) -> list[str]:
    """The idempotency keys of every execution of send_notice, one per execution."""
    log = outbox / "sends.log"
    return log.read_text().split() if log.exists() else []


def build_agent(store: Store, outbox: Path, script: Sequence[dict[str, Any]] = FULL_SCRIPT) -> Agent:
    @tool(effect="side_effect")  # no probe: an interrupted send has an unknown outcome
    def send_notice(to: str, *, call: ToolCall) -> str:
        """Send a notice to a customer."""
        with open(outbox / "sends.log", "a", encoding="utf-8") as log:
            log.write(call.idempotency_key + "\n")
            log.flush()
            os.fsync(log.fileno())
        return f"notice sent to {to}"

    return Agent(ScriptedModel(script), tools=[send_notice], store=store, unknown_policy="pause")


def make_agent() -> Agent:
    return build_agent(open_store(os.environ[STORE_ENV]), Path(os.environ[OUTBOX_ENV]))


if __name__ == "__main__":
    make_agent().run(TASK, run_id=RUN_ID)
