"""``UnbrokenSession`` keeps the SDK's ``Session`` contract where the SDK's own sessions do:
settings default and validation, ``session_settings.limit``, ``close()``, bad items. (The
SDK's own session test files were run against it by hand, see docs/integrations/openai-agents.md.)"""

from __future__ import annotations

import asyncio
from typing import Any, cast

import pytest
from agents.items import TResponseInputItem
from agents.memory import SessionSettings

from unbroken import ConfigError, open_store
from unbroken.integrations.openai_agents import UnbrokenSession


def session(settings: Any = None) -> UnbrokenSession:
    return UnbrokenSession("chat", open_store("memory://"), session_settings=settings)


def contents(items: list[TResponseInputItem]) -> list[Any]:
    return [cast(dict[str, Any], item)["content"] for item in items]


async def fill(target: UnbrokenSession, n: int) -> None:
    await target.add_items([{"role": "user", "content": str(i)} for i in range(n)])


def test_settings_default_to_the_sdks_defaults_not_none() -> None:
    assert session().session_settings == SessionSettings()


def test_a_settings_dict_becomes_session_settings() -> None:
    settings = session({"limit": 0}).session_settings
    assert isinstance(settings, SessionSettings) and settings.limit == 0


def test_an_unknown_settings_field_is_rejected() -> None:
    with pytest.raises(Exception, match="limitt"):
        session({"limitt": 1})


def test_get_items_honours_the_settings_limit_and_an_explicit_limit_wins() -> None:
    async def scenario() -> None:
        limited = session(SessionSettings(limit=2))
        await fill(limited, 5)
        assert contents(await limited.get_items()) == ["3", "4"]
        assert contents(await limited.get_items(limit=4)) == ["1", "2", "3", "4"]
        zero = session({"limit": 0})
        await fill(zero, 3)
        assert await zero.get_items() == []

    asyncio.run(scenario())


def test_a_closed_session_refuses_every_call_and_keeps_what_it_saved() -> None:
    async def scenario() -> None:
        store = open_store("memory://")
        first = UnbrokenSession("chat", store)
        await fill(first, 2)
        first.close()
        first.close()
        with pytest.raises(ConfigError, match="closed"):
            await first.add_items([])
        with pytest.raises(ConfigError, match="closed"):
            await first.get_items()
        assert contents(await UnbrokenSession("chat", store).get_items()) == ["0", "1"]

    asyncio.run(scenario())


def test_an_item_that_is_not_json_raises_type_error_and_stores_nothing() -> None:
    async def scenario() -> None:
        target = session()
        with pytest.raises(TypeError, match="object, which is not JSON"):
            await target.add_items([cast(TResponseInputItem, {"role": "user", "content": object()})])
        assert await target.get_items() == []

    asyncio.run(scenario())
