"""Anthropic-shaped model scripts and tools shared by the feature tests (approvals,
conversations, fork, hooks, resources)."""

from __future__ import annotations

from typing import Any

USAGE = {"input_tokens": 100, "output_tokens": 20}
TOKENS_PER_TURN = 120


def tool_turn(*calls: tuple[str, str, dict[str, Any]], text: str = "working") -> dict[str, Any]:
    blocks: list[dict[str, Any]] = [{"type": "text", "text": text}]
    blocks += [{"type": "tool_use", "id": call_id, "name": name, "input": args} for call_id, name, args in calls]
    return {"content": blocks, "stop_reason": "tool_use", "usage": dict(USAGE)}


def final_turn(text: str = "All done.") -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}], "stop_reason": "end_turn", "usage": dict(USAGE)}


def tool_results(messages: list[Any]) -> list[dict[str, Any]]:
    """Every tool_result block in an Anthropic history, in order."""
    return [
        block
        for message in messages
        if message.get("role") == "user" and isinstance(message.get("content"), list)
        for block in message["content"]
        if block.get("type") == "tool_result"
    ]
