"""Anthropic-shaped scripts for the core runner tests."""

from __future__ import annotations

from typing import Any

USAGE = {"input_tokens": 100, "output_tokens": 20, "cache_read_input_tokens": 5}
TOKENS_PER_TURN = 125


def tool_turn(*calls: tuple[str, str, dict[str, Any]], text: str = "working") -> dict[str, Any]:
    blocks: list[dict[str, Any]] = [{"type": "thinking", "thinking": "plan", "signature": "c2lnbmF0dXJl"}]
    blocks.append({"type": "text", "text": text})
    for call_id, name, arguments in calls:
        blocks.append({"type": "tool_use", "id": call_id, "name": name, "input": arguments})
    return {"content": blocks, "stop_reason": "tool_use", "usage": dict(USAGE)}


def final_turn(text: str = "All done.") -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}], "stop_reason": "end_turn", "usage": dict(USAGE)}


def reading_script(turns: int) -> list[dict[str, Any]]:
    """``turns`` turns that each read one ticket, then a final answer."""
    script = [tool_turn((f"toolu_{i:03d}", "read_ticket", {"ticket_id": f"T{i}"})) for i in range(turns)]
    script.append(final_turn())
    return script
