"""The agent the provider tests run: real SDK clients pointed at the local server, two tools."""

from __future__ import annotations

from typing import Any

from unbroken import Model, tool

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
