"""Runs whose every stored text (task, model text, tool inputs and results, tool errors, output,
business_state, approvals, queued tasks, ledger results) carries terminal control payloads."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from unbroken import Agent, ScriptedModel, open_store, tool

# What a web page the agent read could plant: clear the screen and forge a line, set the window
# title, an OSC 8 link, an OSC 52 clipboard write, C1 CSI, a carriage return, backspaces, a bell,
# DEL, and a right-to-left override that reverses what follows.
PAYLOAD = (
    "\x1b[2J\x1b[H\x1b[32mcompleted\x1b[0m"
    "\x1b]0;pwned-title\x07"
    "\x1b]8;;https://evil.example/\x1b\\click\x1b]8;;\x1b\\"
    "\x1b]52;c;cm0gLXJmIH4=\x07"
    "\x9b31m\x9d0;c1-title\x9c"
    "\r\x08\x08\x07\x7f"
    "\u202eexe.txt\u202c\u2066iso\u2069"
)
# The characters that must never reach a terminal from stored text (tab and newline may).
FORBIDDEN = {chr(code) for code in range(0x20) if chr(code) not in "\t\n"} | {chr(code) for code in range(0x7F, 0xA0)}
FORBIDDEN |= {chr(code) for code in range(0x202A, 0x202F)} | {chr(code) for code in range(0x2066, 0x206A)}

RUN = "hostile-run"
APPROVAL_RUN = "hostile-approval"
QUEUED_RUN = "hostile-queued"
CALL = "toolu_hostile_1"
APPROVAL_CALL = "toolu_hostile_2"


@dataclass
class HostileStore:
    url: str
    db: Path


def _turn(text: str, calls: list[tuple[str, str, dict[str, Any]]], stop: str = "tool_use") -> dict[str, Any]:
    content: list[dict[str, Any]] = [{"type": "text", "text": text}]
    content += [{"type": "tool_use", "id": call_id, "name": name, "input": args} for call_id, name, args in calls]
    return {"content": content, "stop_reason": stop, "usage": {"input_tokens": 1, "output_tokens": 1}}


def build_hostile_store(db: Path) -> HostileStore:
    url = f"sqlite:///{db}"

    @tool(effect="side_effect")
    def fetch_page(url: str) -> str:
        """Fetch a page."""
        return "page says " + PAYLOAD

    @tool(effect="side_effect")
    def broken(note: str) -> str:
        """Fail with hostile text."""
        raise RuntimeError("tool failed: " + PAYLOAD)

    @tool(effect="side_effect", approval=True)
    def pay(amount: str) -> str:
        """Pay someone."""
        return "paid"

    script = [
        _turn(
            "thinking " + PAYLOAD,
            [(CALL, "fetch_page", {"url": PAYLOAD}), ("toolu_b", "broken", {"note": PAYLOAD})],
        ),
        _turn("done " + PAYLOAD, [], stop="end_turn"),
    ]
    with open_store(url) as store:
        Agent(ScriptedModel(script), tools=[fetch_page, broken], store=store).run(
            "task " + PAYLOAD, run_id=RUN, business_state={"note": PAYLOAD, PAYLOAD: 1}
        )
        approval_script = [_turn("pay " + PAYLOAD, [(APPROVAL_CALL, "pay", {"amount": PAYLOAD})])]
        Agent(ScriptedModel(approval_script), tools=[pay], store=store).run("approve " + PAYLOAD, run_id=APPROVAL_RUN)
        store.submit("queued " + PAYLOAD, QUEUED_RUN, agent="some:agent")
    return HostileStore(url, db)
