"""A server that reports odd ``usage`` (an OpenAI-compatible server, a proxy, a bug) never makes a
run that saves but does not load: through the real SDKs, every adapter's answer is normalised
(``unbroken.usage``) and the run loads with a valid token count (issue 21 item 5)."""

from __future__ import annotations

import copy
import math
from typing import Any

import orjson
import pytest
from provider_agents import SYSTEM, TASK, TOOLS, build_model
from provider_server import SCRIPTS, ProviderServer, scripted

from unbroken import Agent, open_store, usage

ODD: list[Any] = [
    {"input_tokens": "lots", "output_tokens": -5, "prompt_tokens": "lots", "completion_tokens": -5, "total_tokens": -1},
    {"input_tokens": 2**70, "prompt_tokens": 2**70, "total_tokens": 2**70, "details": {"cached_tokens": 2**64}},
    {
        "input_tokens": math.nan,
        "prompt_tokens": 1.5,
        "total_tokens": True,
        "x": {"a": {"b": {"c": {"d": {"e": {"f": {}}}}}}},
    },
]


@pytest.mark.parametrize("provider", sorted(SCRIPTS))
@pytest.mark.parametrize("odd", ODD, ids=repr)
def test_odd_usage_from_the_server_is_normalised_and_the_run_loads(
    server: ProviderServer, provider: str, odd: Any
) -> None:
    script, turn_of = SCRIPTS[provider]
    script = copy.deepcopy(script)
    script[0]["usage"] = odd
    server.responder = scripted(script, turn_of)
    store = open_store("memory://")
    agent = Agent(model=build_model(provider, server.url), tools=TOOLS, store=store, system=SYSTEM)
    result = agent.run(TASK, run_id="odd")
    assert result.status == "completed"
    loaded = store.load("odd")
    assert 0 < loaded.tokens_used < 2**53  # the later turns' valid counts, nothing from the odd one
    orjson.dumps(loaded.usage)  # plain JSON within every reader's limits
    assert loaded.usage[usage.DROPPED] >= 1
