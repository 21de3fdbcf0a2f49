"""The benchmark workload: an agent run whose turns are ~2.4 KB of Anthropic-shaped messages.

Each turn is one assistant message (a text block and one ``tool_use`` block) and one user
message holding the ``tool_result``. Everything is deterministic, so every approach measured
in one run sees byte-identical history.
"""

from __future__ import annotations

import json
import random
from typing import Any

TASK = "Summarise last quarter's support tickets into a table by category"
TOOL_NAME = "read_ticket"
_WORDS = [
    "refund",
    "invoice",
    "login",
    "timeout",
    "crash",
    "export",
    "billing",
    "latency",
    "account",
    "password",
    "upgrade",
    "customer",
    "shipping",
    "delay",
    "webhook",
    "integration",
    "dashboard",
    "report",
    "mobile",
    "android",
    "ios",
    "browser",
    "cache",
    "region",
    "outage",
    "escalation",
    "priority",
    "resolved",
    "pending",
    "duplicate",
    "feature",
    "request",
    "bug",
]
_POOL_SIZE = 64


def _pool(length: int, seed: int) -> list[str]:
    """A few dozen distinct passages of about ``length`` characters (built once, reused)."""
    rng = random.Random(seed)
    passages = []
    for _ in range(_POOL_SIZE):
        words: list[str] = []
        size = 0
        while size < length:
            word = rng.choice(_WORDS)
            words.append(word)
            size += len(word) + 1
        passages.append(" ".join(words)[:length])
    return passages


_THOUGHTS = _pool(760, 1)
_RESULTS = _pool(1340, 2)


def call_id(turn: int) -> str:
    return f"toolu_{turn:08d}"


def assistant_message(turn: int) -> dict[str, Any]:
    """The model's answer at ``turn`` (0-based): some reasoning text and one tool call."""
    return {
        "role": "assistant",
        "content": [
            {"type": "text", "text": f"Turn {turn}: {_THOUGHTS[turn % _POOL_SIZE]}"},
            {
                "type": "tool_use",
                "id": call_id(turn),
                "name": TOOL_NAME,
                "input": {"ticket_id": f"T-{turn:06d}", "fields": ["subject", "body", "category", "status"]},
            },
        ],
    }


def tool_input(turn: int) -> dict[str, Any]:
    content = assistant_message(turn)["content"]
    return dict(content[1]["input"])


def tool_result_text(turn: int) -> str:
    return f"Ticket T-{turn:06d}: {_RESULTS[turn % _POOL_SIZE]}"


def result_message(turn: int) -> dict[str, Any]:
    """The user message answering ``turn``'s tool call (what the provider format produces)."""
    return {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": call_id(turn), "content": tool_result_text(turn)}],
    }


def usage(turn: int) -> dict[str, int]:
    return {"input_tokens": 1200 + turn, "output_tokens": 220}


def history(turns: int) -> list[dict[str, Any]]:
    """The whole message history after ``turns`` turns (the first message is the task)."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": TASK}]
    for turn in range(turns):
        messages.append(assistant_message(turn))
        messages.append(result_message(turn))
    return messages


def history_bytes(turns: int) -> int:
    """Raw history size: the messages as compact UTF-8 JSON."""
    text = json.dumps(history(turns), ensure_ascii=False, separators=(",", ":"))
    return len(text.encode())


def script(turns: int) -> list[dict[str, Any]]:
    """A ScriptedModel script: ``turns`` tool-calling answers, then a final answer."""
    responses: list[dict[str, Any]] = [
        {"content": assistant_message(turn)["content"], "stop_reason": "tool_use", "usage": usage(turn)}
        for turn in range(turns)
    ]
    responses.append({"content": [{"type": "text", "text": "Done."}], "stop_reason": "end_turn", "usage": usage(turns)})
    return responses
