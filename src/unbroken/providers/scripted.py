"""``ScriptedModel``: a deterministic model that plays a script of Anthropic-shaped answers.

Its answer depends only on the history it is sent: the k-th answer for a history holding
k-1 assistant messages. A resumed process therefore continues the script exactly where the
dead one stopped. Used by the demo, the tests and ``unbroken chaos``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError
from ..model import ModelTurn, ToolSpec
from ..state import JSONValue
from . import anthropic_format as fmt
from ._base import FormatModel

if TYPE_CHECKING:
    from pathlib import Path


class ScriptExhausted(RuntimeError):
    """The script has no answer for this many assistant turns."""


class ScriptedModel(FormatModel):
    """Plays ``responses`` in order. Each response is ``{"content": [blocks...],
    "stop_reason": ..., "usage": {...}}`` as the Anthropic Messages API returns it."""

    provider = fmt.PROVIDER
    history_format = fmt.HISTORY

    def __init__(self, responses: Sequence[Mapping[str, Any]]) -> None:
        checked = []
        for index, response in enumerate(responses):
            if not isinstance(response, Mapping) or not isinstance(response.get("content"), list):
                raise ConfigError(f"script response {index} must be an object with a 'content' list of blocks")
            for block in response["content"]:
                call_id, name = (block.get("id"), block.get("name")) if isinstance(block, Mapping) else (None, None)
                is_call = isinstance(block, Mapping) and block.get("type") == "tool_use"
                if is_call and not (isinstance(call_id, str) and call_id and isinstance(name, str)):
                    raise ConfigError(
                        f"script response {index}: every tool_use block needs a non-empty string 'id' (its "
                        "tool_result answers that id) and a 'name'; see docs/scripted-model.md"
                    )
            checked.append(dict(response))
        self.responses = checked
        self.calls = 0

    @classmethod
    def from_file(cls, path: str | Path) -> ScriptedModel:
        """Load a script: a JSON list of responses, or ``{"responses": [...]}``."""
        try:
            with open(path, encoding="utf-8") as script:
                data = json.loads(script.read())
        except (OSError, ValueError) as exc:
            raise ConfigError(f"cannot read script {path}: {exc}") from exc
        if isinstance(data, Mapping):
            data = data.get("responses")
        if not isinstance(data, list):
            raise ConfigError(f"script {path} must hold a JSON list of responses or {{'responses': [...]}}")
        return cls(data)

    def complete(self, messages: Sequence[JSONValue], tools: Sequence[ToolSpec], system: str | None) -> ModelTurn:
        self.calls += 1
        index = sum(1 for m in messages if isinstance(m, Mapping) and m.get("role") == "assistant")
        if index >= len(self.responses):
            raise ScriptExhausted(f"the script has {len(self.responses)} answers; answer {index + 1} was asked for")
        response = json.loads(json.dumps(self.responses[index]))  # a private copy, as an SDK would give
        content = response["content"]
        stop_reason = response.get("stop_reason")
        usage = response.get("usage")  # as the script gives it: odd values are dropped with a note (usage.py)
        calls = fmt.tool_calls(content)
        done = not calls and stop_reason in fmt.FINAL_STOP_REASONS
        return fmt.assistant_turn(content, calls, usage, stop_reason=stop_reason, text=fmt.text_of(content), done=done)

    async def acomplete(
        self, messages: Sequence[JSONValue], tools: Sequence[ToolSpec], system: str | None
    ) -> ModelTurn:
        return self.complete(messages, tools, system)
