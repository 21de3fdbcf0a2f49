"""Models for the runner: the scripted test model here; the SDK adapters load lazily so that
``import unbroken`` never imports an LLM SDK."""

from __future__ import annotations

from typing import Any

from .scripted import ScriptedModel, ScriptExhausted

_LAZY = {
    "AnthropicModel": ".anthropic",
    "OpenAIChatModel": ".openai_chat",
    "OpenAIResponsesModel": ".openai_responses",
    "from_env": ".env",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from importlib import import_module

        return getattr(import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "AnthropicModel",
    "OpenAIChatModel",
    "OpenAIResponsesModel",
    "ScriptExhausted",
    "ScriptedModel",
    "from_env",
]
