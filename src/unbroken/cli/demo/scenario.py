"""The demo's world: a quarter of support tickets, three tools (one per effect class) and the
agent that uses them.

* ``read_ticket`` (read_only): returns one ticket from the package data.
* ``write_report`` (idempotent): writes ``report.md`` in the work dir with an atomic replace,
  stamped with the call's idempotency key; writing it twice leaves the same file.
* ``email_team`` (side_effect): "delivers" an email by writing one JSON file per idempotency
  key into ``outbox/``. Its probe looks the key up there, so after a crash the ledger can tell
  a delivered email from one that never left.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from ... import Agent, Found, NotExecuted, Store, Tool, ToolCall, Unknown, open_store, tool

RUN_ID = "q3-report"
TEAM_ADDRESS = "support-leads@example.com"
REPORT_FILE = "report.md"
OUTBOX_DIR = "outbox"
SCRIPT_FILE = "script.json"
STORE_FILE = "runs.db"
WORKDIR_ENV_VAR = "UNBROKEN_DEMO_WORKDIR"
SYSTEM_PROMPT = (
    "You are a support analyst. Read every ticket of the quarter with read_ticket, escalate anything "
    "urgent to the team with email_team as soon as you see a pattern, then write the report with "
    "write_report and answer with the table."
)

# Ordered: the first category whose pattern matches a ticket's subject or body wins.
CATEGORIES: tuple[tuple[str, str], ...] = (
    ("Billing", r"\b(charged|invoice|refund|receipt|payment)"),
    ("Login & access", r"\b(log ?in|password|2fa|sso|locked out)"),
    ("Performance", r"\b(slow|timeout|lag)\b|\bslowly\b"),
    ("Feature request", r"\b(feature|would be great|could you add|wish|api for)"),
    ("Bug", r"\b(bug|error|crash|broken|wrong)"),
)
OTHER_CATEGORY = "Other"


@cache
def load_tickets() -> dict[str, Any]:
    """The shipped quarter: ``{"quarter": ..., "tickets": [...]}`` (package data)."""
    text = resources.files("unbroken.cli.demo").joinpath("data/tickets.json").read_text(encoding="utf-8")
    data: dict[str, Any] = json.loads(text)
    return data


def task_text() -> str:
    tickets = load_tickets()["tickets"]
    return (
        f"Summarise last quarter's support tickets ({load_tickets()['quarter']}: {tickets[0]['id']} to "
        f"{tickets[-1]['id']}) into a table by category, write the report, and email the team about "
        "anything urgent."
    )


def categorise(ticket: dict[str, Any]) -> str:
    """The category the scripted analyst assigns to a ticket."""
    text = f"{ticket['subject']} {ticket['body']}".lower()
    for name, pattern in CATEGORIES:
        if re.search(pattern, text):
            return name
    return OTHER_CATEGORY


def atomic_write(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` so a reader sees the old file or the whole new one, never a part:
    temp file in the same directory, fsync, rename, fsync of the directory."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp_name, path)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def outbox_emails(workdir: Path) -> list[dict[str, Any]]:
    """Every email delivered to the demo's outbox (temp files of an interrupted write excluded)."""
    outbox = workdir / OUTBOX_DIR
    if not outbox.is_dir():
        return []
    return [json.loads(path.read_text(encoding="utf-8")) for path in sorted(outbox.glob("ub_*.json"))]


def _receipt(email: dict[str, Any]) -> str:
    # The tool's result and the probe's Found(...) must say the same thing: build both here.
    return f"Delivered to {email['to']}: {email['subject']!r} (message id {email['idempotency_key']})"


def build_tools(workdir: Path) -> list[Tool]:
    """The three demo tools, writing into ``workdir``."""
    tickets = {ticket["id"]: ticket for ticket in load_tickets()["tickets"]}
    outbox = workdir / OUTBOX_DIR

    @tool(effect="read_only")
    def read_ticket(ticket_id: str, *, state: dict[str, Any]) -> str:
        """Read one support ticket by id (for example T-1001): customer, priority, subject, body."""
        ticket = tickets.get(ticket_id)
        if ticket is None:
            raise KeyError(f"there is no ticket {ticket_id}")
        read = state.setdefault("tickets_read", [])
        if ticket_id not in read:
            read.append(ticket_id)
        return json.dumps(ticket, ensure_ascii=False)

    @tool(effect="idempotent")
    def write_report(markdown: str, *, call: ToolCall) -> str:
        """Write the quarterly report (markdown) to report.md, replacing any previous version."""
        text = f"<!-- written by write_report, idempotency key {call.idempotency_key} -->\n{markdown}"
        atomic_write(workdir / REPORT_FILE, text)
        return f"Wrote {REPORT_FILE} ({len(text.encode())} bytes)"

    def email_probe(call: ToolCall) -> Found | NotExecuted | Unknown:
        path = outbox / f"{call.idempotency_key}.json"
        try:
            email = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return NotExecuted()
        except (OSError, ValueError) as exc:
            return Unknown(f"outbox entry {path.name} is unreadable: {exc}")
        return Found(_receipt(email))

    @tool(effect="side_effect", probe=email_probe)
    def email_team(subject: str, body: str, *, call: ToolCall) -> str:
        """Email the support leads. A real side effect: delivered at most once per call."""
        email = {"to": TEAM_ADDRESS, "subject": subject, "body": body, "idempotency_key": call.idempotency_key}
        atomic_write(outbox / f"{call.idempotency_key}.json", json.dumps(email, ensure_ascii=False, indent=2))
        return _receipt(email)

    return [read_ticket, write_report, email_team]


def store_url(workdir: Path) -> str:
    return f"sqlite:///{workdir.resolve() / STORE_FILE}"


def build_agent(workdir: Path, store: Store | None = None, *, live: bool = False) -> Agent:
    """The demo agent: the scripted model in ``workdir/script.json``, the three tools, SQLite in
    ``workdir``. With ``live``, the real Anthropic or OpenAI API when ``ANTHROPIC_API_KEY`` or
    ``OPENAI_API_KEY`` is set (``unbroken.providers.from_env``), the scripted model otherwise."""
    from ... import ScriptedModel

    scripted = ScriptedModel.from_file(workdir / SCRIPT_FILE)
    if live:
        from ...providers import from_env

        model = from_env(fallback=scripted)
    else:
        model = scripted
    return Agent(
        model=model,
        tools=build_tools(workdir),
        store=store if store is not None else open_store(store_url(workdir)),
        max_turns=40,
        system=SYSTEM_PROMPT,
    )


def demo_agent() -> Agent:
    """Zero-argument factory for ``unbroken resume q3-report --agent unbroken.cli.demo.scenario:demo_agent``:
    the demo agent for the work dir named by ``$UNBROKEN_DEMO_WORKDIR`` (else the current directory)."""
    return build_agent(Path(os.environ.get(WORKDIR_ENV_VAR) or "."))
