"""A provider's odd usage (negative, beyond 64 bits, not a number) never breaks a run: the run
goes on, every acknowledged save loads, and the token total never goes backwards. Found by the
simulator: a negative count was saved (acknowledged) and then refused by every load
(``tokens_used is -40, not a non-negative integer``); a count beyond 64 bits or a NaN made
every save of the turn fail, so the run could never go on."""

from __future__ import annotations

from typing import Any

import pytest

from unbroken.testing.simulate import from_text, play
from unbroken.testing.simulate.world import Scenario


def two_turns(usage: dict[str, Any]) -> list[dict[str, Any]]:
    def call(token: str) -> dict[str, Any]:
        return {"type": "tool_use", "id": "call_0", "name": "lookup", "input": {"token": token}}

    return [
        {"content": [call("t0-c0")], "stop_reason": "tool_use", "usage": {"input_tokens": 10}},
        {"content": [call("t1-c0")], "stop_reason": "tool_use", "usage": usage},
        {"content": [{"type": "text", "text": "done"}], "stop_reason": "end_turn", "usage": {"output_tokens": 3}},
    ]


@pytest.mark.parametrize(
    "usage",
    [
        {"input_tokens": -50},
        {"input_tokens": 2**70},
        {"output_tokens": 2**63},
        {"input_tokens": float("nan")},
        {"cache": {"read": float("inf")}},
        {"input_tokens": "12"},
    ],
    ids=["negative", "beyond-64-bits", "beyond-63-bits", "nan", "nested-infinity", "text"],
)
def test_odd_usage_never_breaks_a_run(usage: dict[str, Any]) -> None:
    outcome = play(Scenario(1, ("h0",), two_turns(usage)), from_text("step p0 20"))
    assert outcome.trace == ["p0 run call returned"]
    assert not outcome.failed, [str(v) for v in outcome.violations]
