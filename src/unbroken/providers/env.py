"""``from_env``: the real API when a key is set, the scripted model when none is."""

from __future__ import annotations

import os
from collections.abc import Mapping

from ..errors import ConfigError
from ..model import Model

DEFAULT_ANTHROPIC_MODEL = "claude-sonnet-4-5"
DEFAULT_OPENAI_MODEL = "gpt-5-mini"


def from_env(
    fallback: Model | None = None,
    *,
    prefer: str | None = None,
    use_async: bool = False,
    environ: Mapping[str, str] | None = None,
) -> Model:
    """Pick a model from the environment.

    ``ANTHROPIC_API_KEY`` set: an ``AnthropicModel`` (model ``UNBROKEN_ANTHROPIC_MODEL``, default
    claude-sonnet-4-5). Else ``OPENAI_API_KEY`` set: an ``OpenAIResponsesModel`` (or with
    ``UNBROKEN_OPENAI_API=chat`` an ``OpenAIChatModel``; model ``UNBROKEN_OPENAI_MODEL``, default
    gpt-5-mini). Else ``fallback`` (a ``ScriptedModel``, typically). ``prefer="openai"`` or
    ``"anthropic"`` picks that provider first when both keys are set; ``use_async`` builds the
    SDK's async client (for ``Agent.arun``). The SDK is imported only when its key is set.
    """
    env = os.environ if environ is None else environ
    order = ["openai", "anthropic"] if prefer == "openai" else ["anthropic", "openai"]
    for provider in order:
        if provider == "anthropic" and env.get("ANTHROPIC_API_KEY"):
            import anthropic

            from .anthropic import AnthropicModel

            client = anthropic.AsyncAnthropic() if use_async else anthropic.Anthropic()
            return AnthropicModel(client, model=env.get("UNBROKEN_ANTHROPIC_MODEL", DEFAULT_ANTHROPIC_MODEL))
        if provider == "openai" and env.get("OPENAI_API_KEY"):
            import openai

            openai_client = openai.AsyncOpenAI() if use_async else openai.OpenAI()
            model = env.get("UNBROKEN_OPENAI_MODEL", DEFAULT_OPENAI_MODEL)
            if env.get("UNBROKEN_OPENAI_API", "responses") == "chat":
                from .openai_chat import OpenAIChatModel

                return OpenAIChatModel(openai_client, model=model)
            from .openai_responses import OpenAIResponsesModel

            return OpenAIResponsesModel(openai_client, model=model)
    if fallback is None:
        raise ConfigError("no ANTHROPIC_API_KEY or OPENAI_API_KEY is set and no fallback model was given")
    return fallback
