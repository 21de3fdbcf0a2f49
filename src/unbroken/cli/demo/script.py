"""The demo's model, as a script: what a careful analyst model would answer, turn by turn.

Generated deterministically from the ticket data, so the same bytes come out on every machine.
Each response is shaped like an Anthropic Messages API answer (content blocks, ``stop_reason``,
``usage`` with prompt-cache counters); some turns open with a ``thinking`` block carrying a
signature, which unbroken must store and send back unmodified.

The plan: read the tickets (one per turn, two on every sixth turn, as a model batching calls
would); as soon as the third urgent ticket is read, email the team an escalation; when all are
read, write the report; then answer with the table.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections import Counter
from typing import Any

from .scenario import CATEGORIES, OTHER_CATEGORY, categorise, load_tickets

MODEL_NAME = "claude-scripted-demo"
_PROMPT_TOKENS = 1_850  # system prompt, tool definitions and the task
_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
ESCALATE_AFTER_URGENT = 3
READ_TWO_EVERY = 6


def _ident(prefix: str, *parts: object) -> str:
    digest = hashlib.sha256(":".join(str(p) for p in parts).encode()).digest()
    return prefix + "".join(_ALPHABET[b % len(_ALPHABET)] for b in digest[:22])


def _thinking(text: str) -> dict[str, Any]:
    signature = base64.b64encode(hashlib.sha512(text.encode()).digest() * 2).decode()
    return {"type": "thinking", "thinking": text, "signature": signature}


def _tokens(text: str) -> int:
    return max(1, len(text) // 4)


class _Writer:
    """Builds responses and keeps a plausible running count of the context size."""

    def __init__(self) -> None:
        self.responses: list[dict[str, Any]] = []
        self.context = _PROMPT_TOKENS
        self.pending_input = 0  # tokens the next request adds (tool results)

    def turn(self, blocks: list[dict[str, Any]], stop_reason: str) -> None:
        number = len(self.responses) + 1
        output = sum(_tokens(json.dumps(block)) for block in blocks)
        if number == 1:
            usage = {
                "input_tokens": 12,
                "cache_creation_input_tokens": self.context,
                "cache_read_input_tokens": 0,
                "output_tokens": output,
            }
        else:
            usage = {
                "input_tokens": self.pending_input,
                "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": self.context,
                "output_tokens": output,
            }
        self.context += self.pending_input + output
        self.pending_input = 0
        self.responses.append(
            {
                "id": _ident("msg_01", "message", number),
                "type": "message",
                "role": "assistant",
                "model": MODEL_NAME,
                "content": blocks,
                "stop_reason": stop_reason,
                "stop_sequence": None,
                "usage": usage,
            }
        )

    def tool_use(self, name: str, arguments: dict[str, Any], index: int = 0) -> dict[str, Any]:
        number = len(self.responses) + 1
        return {"type": "tool_use", "id": _ident("toolu_01", number, index), "name": name, "input": arguments}

    def expect_result(self, text: str) -> None:
        self.pending_input += _tokens(text) + 8


def report_rows(tickets: list[dict[str, Any]]) -> list[tuple[str, int, int, list[str]]]:
    """(category, tickets, urgent or high, ticket ids) in the report's order."""
    by_category: dict[str, list[dict[str, Any]]] = {}
    for ticket in tickets:
        by_category.setdefault(categorise(ticket), []).append(ticket)
    order = [name for name, _ in CATEGORIES] + [OTHER_CATEGORY]
    rows = []
    for name in order:
        group = by_category.get(name, [])
        if group:
            pressing = sum(1 for t in group if t["priority"] in ("urgent", "high"))
            rows.append((name, len(group), pressing, [t["id"] for t in group]))
    return rows


def report_markdown(quarter: str, tickets: list[dict[str, Any]]) -> str:
    lines = [
        f"# Support tickets, {quarter}, by category",
        "",
        "| Category | Tickets | Urgent or high | Ticket ids |",
        "|---|---:|---:|---|",
    ]
    rows = report_rows(tickets)
    for name, count, pressing, ids in rows:
        lines.append(f"| {name} | {count} | {pressing} | {', '.join(ids)} |")
    lines.append(f"| Total | {sum(r[1] for r in rows)} | {sum(r[2] for r in rows)} | |")
    return "\n".join(lines) + "\n"


def build_script() -> list[dict[str, Any]]:
    """The demo model's answers, in order (deterministic)."""
    data = load_tickets()
    quarter: str = data["quarter"]
    tickets: list[dict[str, Any]] = data["tickets"]
    writer = _Writer()
    urgent: list[dict[str, Any]] = []
    escalated = False
    position = 0
    while position < len(tickets):
        size = 2 if (len(writer.responses) + 1) % READ_TWO_EVERY == 0 else 1
        group = tickets[position : position + size]
        position += len(group)
        blocks: list[dict[str, Any]] = []
        if not writer.responses:
            blocks.append(
                _thinking(
                    f"{len(tickets)} tickets for {quarter}. Read them in order, note a category and the "
                    "priority for each, and watch for clusters of urgent tickets that the team should hear "
                    "about before the report is done."
                )
            )
        ids = " and ".join(t["id"] for t in group)
        blocks.append({"type": "text", "text": f"Reading {ids}."})
        for index, ticket in enumerate(group):
            blocks.append(writer.tool_use("read_ticket", {"ticket_id": ticket["id"]}, index))
            writer.expect_result(json.dumps(ticket))
        writer.turn(blocks, "tool_use")
        urgent.extend(t for t in group if t["priority"] == "urgent")
        if not escalated and len(urgent) >= ESCALATE_AFTER_URGENT:
            escalated = True
            ids = ", ".join(t["id"] for t in urgent)
            customers = ", ".join(t["customer"] for t in urgent)
            body = (
                f"Heads-up from the {quarter} ticket review: {len(urgent)} customers ({customers}) report being "
                f"charged twice for August, a day apart ({ids}). This looks systematic, not a one-off; please "
                "check the payment retry job before the September run. The full report follows."
            )
            writer.turn(
                [
                    _thinking(
                        f"Third urgent ticket, and all of them are duplicate August charges ({ids}). "
                        "That is a pattern the team needs today, not at the end of the review."
                    ),
                    {"type": "text", "text": "Escalating the duplicate charges to the team now."},
                    writer.tool_use(
                        "email_team",
                        {"subject": f"Urgent: duplicate August charges ({len(urgent)} customers)", "body": body},
                    ),
                ],
                "tool_use",
            )
            writer.expect_result("Delivered to support-leads@example.com: message id ub_" + "0" * 40)
    markdown = report_markdown(quarter, tickets)
    counts = Counter(categorise(t) for t in tickets)
    top, top_count = counts.most_common(1)[0]
    writer.turn(
        [
            _thinking(f"All {len(tickets)} tickets read. {top} is the largest group ({top_count}). Write the report."),
            {"type": "text", "text": "All tickets read; writing the report."},
            writer.tool_use("write_report", {"markdown": markdown}),
        ],
        "tool_use",
    )
    writer.expect_result("Wrote report.md (1200 bytes)")
    writer.turn(
        [
            {
                "type": "text",
                "text": (
                    f"Here is the {quarter} summary ({len(tickets)} tickets); it is also in report.md.\n\n{markdown}\n"
                    f"{top} is the largest category. The duplicate August charges were escalated to the team."
                ),
            }
        ],
        "end_turn",
    )
    return writer.responses


def expected_totals(script: list[dict[str, Any]]) -> tuple[int, int]:
    """(turns, tokens) a complete run of ``script`` must end with: each answer counted once."""
    keys = ("input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
    tokens = sum(int(response["usage"].get(key, 0)) for response in script for key in keys)
    return len(script), tokens


def crash_spec(script: list[dict[str, Any]], tool_name: str = "email_team") -> str:
    """``UNBROKEN_CRASH_AT`` value that kills the process right after ``tool_name`` has run and
    before its outcome is saved (the n-th ``tool.after_execute`` of an uninterrupted run)."""
    count = 0
    for response in script:
        for block in response["content"]:
            if block.get("type") == "tool_use":
                count += 1
                if block["name"] == tool_name:
                    return f"tool.after_execute:{count}"
    raise ValueError(f"the script never calls {tool_name}")


def turn_of_call(script: list[dict[str, Any]], tool_name: str) -> int:
    """The turn (1-based) on which the script calls ``tool_name``."""
    for number, response in enumerate(script, start=1):
        if any(b.get("type") == "tool_use" and b.get("name") == tool_name for b in response["content"]):
            return number
    raise ValueError(f"the script never calls {tool_name}")
