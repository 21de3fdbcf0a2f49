"""A complete resumable agent in one file: run it, kill it, run it again.

    pip install -e .                                                    # once, from the repository root
    python examples/quickstart.py --fresh                               # runs to the end
    UNBROKEN_CRASH_AT=tool.after_execute:5 python examples/quickstart.py --fresh   # SIGKILLed right after its email
    python examples/quickstart.py                                       # resumes where it died; one email, not two

``--fresh`` deletes the previous run first, so the steps work again on a second try. State lives
in $QUICKSTART_DIR, by default ``unbroken-quickstart`` in the system temp directory (a SQLite
store, an outbox, a report), never in the repository. With ANTHROPIC_API_KEY or OPENAI_API_KEY
set, the same agent runs against the real API; otherwise a scripted model plays.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

from unbroken import Agent, Found, NotExecuted, ScriptedModel, ToolCall, open_store, tool
from unbroken.providers import from_env

HERE = Path(os.environ.get("QUICKSTART_DIR") or Path(tempfile.gettempdir()) / "unbroken-quickstart")
TICKETS = {"T-1": "Login fails on mobile", "T-2": "Invoice shows the wrong VAT", "T-3": "Export to CSV is slow"}


@tool(effect="read_only")
def read_ticket(ticket_id: str) -> str:
    """Read one support ticket by id."""
    return TICKETS.get(ticket_id, "no such ticket")


@tool(effect="idempotent")
def write_report(markdown: str, *, call: ToolCall) -> str:
    """Write the report (the same key always writes the same file)."""
    target = HERE / "report.md"
    temp = target.with_suffix(f".{call.idempotency_key}.tmp")
    temp.write_text(markdown, encoding="utf-8")
    temp.replace(target)
    return f"wrote {target}"


def already_sent(call: ToolCall) -> Found | NotExecuted:
    """Asked only when a crash left it unknown whether the email went out."""
    sent = HERE / "outbox" / f"{call.idempotency_key}.json"
    return Found(f"sent to {json.loads(sent.read_text())['to']}") if sent.exists() else NotExecuted()


@tool(effect="side_effect", probe=already_sent)
def email_team(subject: str, body: str, *, call: ToolCall) -> str:
    """Email the support team (at most once)."""
    outbox = HERE / "outbox"
    outbox.mkdir(exist_ok=True)
    message = {"to": "team@example.com", "subject": subject, "body": body}
    (outbox / f"{call.idempotency_key}.json").write_text(json.dumps(message), encoding="utf-8")
    return "sent to team@example.com"


def use(call_id: str, name: str, **arguments: str) -> dict[str, object]:
    return {"type": "tool_use", "id": call_id, "name": name, "input": arguments}


def answer(*blocks: dict[str, object], stop: str = "tool_use") -> dict[str, object]:
    return {"content": list(blocks), "stop_reason": stop, "usage": {"input_tokens": 400, "output_tokens": 60}}


SCRIPT = [
    answer(use("toolu_1", "read_ticket", ticket_id="T-1")),
    answer(use("toolu_2", "read_ticket", ticket_id="T-2")),
    answer(use("toolu_3", "read_ticket", ticket_id="T-3")),
    answer(use("toolu_4", "write_report", markdown="| ticket | area |\n|---|---|\n| T-1 | login |\n| T-2 | billing |")),
    answer(use("toolu_5", "email_team", subject="Q3 tickets", body="Report attached: 3 tickets.")),
    answer({"type": "text", "text": "Report written and the team emailed."}, stop="end_turn"),
]


def main() -> None:
    if "--fresh" in sys.argv[1:]:
        shutil.rmtree(HERE, ignore_errors=True)  # forget the previous run: start over
    (HERE / "outbox").mkdir(parents=True, exist_ok=True)
    agent = Agent(
        model=from_env(fallback=ScriptedModel(SCRIPT)),
        tools=[read_ticket, write_report, email_team],
        store=open_store(f"sqlite:///{HERE / 'runs.db'}"),
        max_turns=20,
    )
    result = agent.run("Summarise the open tickets, write a report, email the team.", run_id="quickstart")
    emails = len(list((HERE / "outbox").glob("*.json")))
    print(f"{result.status}: {result.output!r} after {result.turns} turns, {result.tokens_used} tokens"
          f"{' (resumed)' if result.resumed else ''}; {emails} email(s) in {HERE / 'outbox'}")  # fmt: skip


if __name__ == "__main__":
    main()
