"""The simulated model: a script drawn from the seed, played by ``ScriptedModel``.

It behaves like the providers that broke things before: it reuses call ids every turn
(``call_0`` each time) and sometimes twice in one turn, makes parallel calls, and reports
odd usage (missing, None, a string, negative, beyond 64 bits). Each call's input carries a
token naming its turn and position, so an answer can be matched to the call it answers.
"""

from __future__ import annotations

import random
from typing import Any

from ...providers.scripted import ScriptedModel
from .services import TOOL_NAMES

ODD_USAGE: tuple[Any, ...] = (None, "12", 0, -7, 2**63, 2**70, 1.5, float("nan"))
"""Usage values a provider has been seen to send besides plain counts (see ``draw_script``)."""


def draw_script(rng: random.Random, *, odd_usage: tuple[Any, ...] = ODD_USAGE) -> list[dict[str, Any]]:
    """2 to 4 turns of tool calls, then a final answer."""
    responses: list[dict[str, Any]] = []
    for turn in range(rng.randint(2, 4)):
        calls = rng.randint(1, 3)
        content: list[dict[str, Any]] = [{"type": "text", "text": f"turn {turn}"}]
        for position in range(calls):
            call_id = f"call_{position}"
            if position > 0 and rng.random() < 0.15:
                call_id = "call_0"  # the same id twice in one turn
            token = f"t{turn}-c{position}"
            name = rng.choice(TOOL_NAMES)
            content.append({"type": "tool_use", "id": call_id, "name": name, "input": {"token": token}})
        responses.append({"content": content, "stop_reason": "tool_use", "usage": _usage(rng, odd_usage)})
    responses.append(
        {"content": [{"type": "text", "text": "done"}], "stop_reason": "end_turn", "usage": _usage(rng, odd_usage)}
    )
    return responses


def _usage(rng: random.Random, odd: tuple[Any, ...]) -> dict[str, Any]:
    usage: dict[str, Any] = {"input_tokens": rng.randint(1, 500), "output_tokens": rng.randint(1, 200)}
    if odd and rng.random() < 0.3:
        usage[rng.choice(("input_tokens", "output_tokens", "cache_read_input_tokens"))] = rng.choice(odd)
    return usage


def make_model(script: list[dict[str, Any]]) -> ScriptedModel:
    return ScriptedModel(script)
