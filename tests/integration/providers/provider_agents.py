"""The agent the provider tests run: real SDK clients pointed at the local server, two tools."""

from __future__ import annotations

from typing import Any

import pytest

from unbroken import Agent, Model, ModelCallFailed, RunResult, tool

TASK = "Check the weather in two cities and note them"
SYSTEM = "You are a careful assistant."


@tool(effect="read_only")
def lookup(city: str) -> str:
    """Look up the weather in a city."""
    return f"{city}: 21C, clear"


@tool(effect="idempotent")
def save_note(text: str) -> str:
    """Save a note."""
    return f"saved note {text!r}"


TOOLS = [lookup, save_note]


def fails_then_resumes(
    agent: Agent, run_id: str, cause: type[Exception], *, failures: int = 1, resume_task: str | None = None
) -> RunResult:
    """Run ``agent`` ``failures`` times, each failing with ``ModelCallFailed`` caused by the SDK's
    ``cause`` error; then once more (with ``resume_task``), and return that run's result."""
    for _ in range(failures):
        with pytest.raises(ModelCallFailed) as failed:
            agent.run(TASK, run_id=run_id)
        assert isinstance(failed.value.__cause__, cause), repr(failed.value.__cause__)
    return agent.run(resume_task, run_id=run_id)


@tool(effect="read_only")
def step(n: int) -> str:
    """Do step n."""
    return f"step {n} done"


def build_model(
    provider: str, base_url: str, *, use_async: bool = False, max_retries: int = 0, **options: Any
) -> Model:
    """The adapter for ``provider`` on the official SDK client (sync or async)."""
    if provider == "anthropic":
        import anthropic

        from unbroken.providers import AnthropicModel

        cls = anthropic.AsyncAnthropic if use_async else anthropic.Anthropic
        client = cls(api_key="test-key", base_url=base_url, max_retries=max_retries)
        return AnthropicModel(client, model="claude-test", max_tokens=1024, **options)  # type: ignore[no-any-return]
    import openai

    openai_cls = openai.AsyncOpenAI if use_async else openai.OpenAI
    openai_client = openai_cls(api_key="test-key", base_url=f"{base_url}/v1", max_retries=max_retries)
    if provider == "openai-chat":
        from unbroken.providers import OpenAIChatModel

        return OpenAIChatModel(openai_client, model="gpt-test", **options)  # type: ignore[no-any-return]
    from unbroken.providers import OpenAIResponsesModel

    return OpenAIResponsesModel(openai_client, model="gpt-test", **options)  # type: ignore[no-any-return]
