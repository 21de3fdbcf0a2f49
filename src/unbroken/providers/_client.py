"""What the three SDK adapters share: calling an SDK method for its raw JSON, sync or async.

The adapters read the HTTP body the provider sent (``with_raw_response``), not the SDK's parsed
objects, so that blocks and fields the installed SDK does not model survive into the history
byte for byte. A sync client serves ``complete`` and (in a worker thread) ``acomplete``; an
async client serves only ``acomplete``.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable, Mapping
from typing import Any

from ..errors import ConfigError
from ..usage import token_count


class InvalidHistory(ValueError):
    """The history breaks the provider's rules; sending it would only earn an HTTP 400."""


def check_answered(dangling: list[str], who: str) -> None:
    """Refuse to send a history with unanswered tool calls (the runner repairs them first)."""
    if dangling:
        raise InvalidHistory(
            f"{who}: the history has tool calls without results ({', '.join(dangling)}); the API would answer 400"
        )


def is_async(create: Callable[..., Any]) -> bool:
    """True when ``create`` belongs to an async client (``AsyncAnthropic``, ``AsyncOpenAI``, ...)."""
    return inspect.iscoroutinefunction(create)


def _body(raw: Any) -> dict[str, Any]:
    data = json.loads(raw.http_response.content)
    if not isinstance(data, dict):
        raise ValueError(f"the provider answered with a JSON {type(data).__name__}, not an object")
    return data


def post(create: Callable[..., Any], request: Mapping[str, Any], who: str) -> dict[str, Any]:
    """Send ``request`` through a sync client's raw-response method; the response body as JSON."""
    if is_async(create):
        raise ConfigError(
            f"{who} was given an async client; use Agent.arun (or pass the sync client, e.g. Anthropic() / OpenAI())"
        )
    return _body(create(**request))


async def apost(create: Callable[..., Any], request: Mapping[str, Any]) -> dict[str, Any]:
    """Async twin of ``post``: awaits an async client, runs a sync client in a worker thread."""
    if is_async(create):
        return _body(await create(**request))
    import asyncio  # lazily: importing asyncio costs ~35 ms at `import unbroken`

    return await asyncio.to_thread(lambda: _body(create(**request)))


def int_field(mapping: Mapping[str, Any], key: str) -> int:
    return token_count(mapping.get(key)) or 0


def usage_of(response: Mapping[str, Any]) -> dict[str, Any]:
    """The response's ``usage`` object (a copy), or ``{}`` when it has none."""
    usage = response.get("usage")
    return dict(usage) if isinstance(usage, Mapping) else {}
