"""The Claude Agent SDK's own ``SessionStore`` conformance suite
(``claude_agent_sdk.testing.run_session_store_conformance``, unmodified) against
``UnbrokenSessionStore`` on every store, and what unbroken adds on top of it."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import cast

import pytest
from claude_agent_sdk.testing import run_session_store_conformance
from claude_agent_sdk.types import SessionKey, SessionStore, SessionStoreEntry
from pgtest import fresh_schema

from unbroken import open_store
from unbroken.integrations.claude_agent import UnbrokenSessionStore, transcript_run_id
from unbroken.stores.base import Store


def conform(open_one: Callable[[], Store]) -> None:
    stores: list[Store] = []

    def make() -> SessionStore:
        store = open_one()  # a fresh, empty store for each of the 14 contracts
        stores.append(store)
        # Met by shape; list_session_summaries is left out on purpose (the suite skips it).
        return cast(SessionStore, UnbrokenSessionStore(store))

    try:
        asyncio.run(run_session_store_conformance(make))
    finally:
        for store in stores:
            store.close()
    assert len(stores) >= 14  # every contract ran, the optional ones included


def test_conformance_on_memory() -> None:
    conform(lambda: open_store("memory://"))


def test_conformance_on_sqlite(tmp_path: Path) -> None:
    conform(lambda: open_store(f"sqlite:///{tmp_path / f'{uuid.uuid4().hex}.db'}"))


def test_conformance_on_the_file_store(tmp_path: Path) -> None:
    conform(lambda: open_store(f"file://{tmp_path / uuid.uuid4().hex}"))


@pytest.mark.postgres
def test_conformance_on_postgresql() -> None:
    with ExitStack() as schemas:
        conform(lambda: open_store(schemas.enter_context(fresh_schema("ubcas"))[1]))


def _redis_url() -> str:
    server = os.environ.get("UNBROKEN_TEST_REDIS_URL") or "redis://127.0.0.1:6379/0"
    return f"{server}{'&' if '?' in server else '?'}prefix=ubcas-{uuid.uuid4().hex[:12]}&durability=none"


def test_conformance_on_redis() -> None:
    conform(lambda: open_store(_redis_url()))


@pytest.fixture
def s3_base() -> Iterator[str]:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "s3"))
    import s3test

    url = s3test.endpoint()
    yield s3test.store_url(url, s3test.new_bucket(url), prefix="{prefix}")


def test_conformance_on_s3(s3_base: str) -> None:
    conform(lambda: open_store(s3_base.replace("{prefix}", f"t-{uuid.uuid4().hex[:12]}")))


# --------------------------------------------------------------------------- beyond the suite

KEY: SessionKey = {"project_key": "/home/me/project", "session_id": "0b1c7d3e-aaaa-4bbb-8ccc-123456789abc"}


def entry(uuid_: str | None, n: int) -> SessionStoreEntry:
    return cast(SessionStoreEntry, {"type": "user", "n": n, **({"uuid": uuid_} if uuid_ else {})})


def test_a_retried_batch_adds_nothing_twice(tmp_path: Path) -> None:
    # The SDK retries a batch whose reply was lost (3 attempts): entries with a uuid already
    # held are not added again; entries without one are appended as they come.
    store = UnbrokenSessionStore(open_store(f"sqlite:///{tmp_path / 's.db'}"))
    batch = [entry("u1", 1), entry("u2", 2), entry(None, 3)]
    asyncio.run(store.append(KEY, batch))
    asyncio.run(store.append(KEY, [*batch[:2], entry("u2", 2), entry("u3", 4)]))
    assert asyncio.run(store.load(KEY)) == [entry("u1", 1), entry("u2", 2), entry(None, 3), entry("u3", 4)]


def test_appends_from_another_process_are_seen_and_deduplicated(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    store = UnbrokenSessionStore(open_store(url))
    asyncio.run(store.append(KEY, [entry("u1", 1)]))
    code = (
        "import asyncio, sys\n"
        "from unbroken import open_store\n"
        "from unbroken.integrations.claude_agent import UnbrokenSessionStore\n"
        f"key = {KEY!r}\n"
        "other = UnbrokenSessionStore(open_store(sys.argv[1]))\n"
        "batch = [{'type': 'user', 'n': 1, 'uuid': 'u1'}, {'type': 'user', 'n': 2, 'uuid': 'u2'}]\n"
        "asyncio.run(other.append(key, batch))\n"
    )
    subprocess.run([sys.executable, "-c", code, url], check=True, timeout=60)
    asyncio.run(store.append(KEY, [entry("u2", 2), entry("u3", 3)]))  # this process had not seen u2
    assert asyncio.run(store.load(KEY)) == [entry("u1", 1), entry("u2", 2), entry("u3", 3)]


def test_any_names_round_trip_through_listings(tmp_path: Path) -> None:
    store = UnbrokenSessionStore(open_store(f"sqlite:///{tmp_path / 's.db'}"))
    odd_session = "sess.with/odd_chars:é" + "x" * 300  # too long for a run id: kept by its hash
    odd_sub = "subagents/agent-ü.1"
    for session in ("plain-1", "sess.with/odd_chars:é", odd_session):
        asyncio.run(store.append({**KEY, "session_id": session}, [entry(None, 1)]))
    asyncio.run(store.append({**KEY, "session_id": odd_session, "subpath": odd_sub}, [entry(None, 2)]))
    listed = asyncio.run(store.list_sessions(KEY["project_key"]))
    assert sorted(row["session_id"] for row in listed) == sorted(["plain-1", "sess.with/odd_chars:é", odd_session])
    assert asyncio.run(store.list_subkeys({"project_key": KEY["project_key"], "session_id": odd_session})) == [odd_sub]
    assert len(transcript_run_id({**KEY, "session_id": odd_session, "subpath": odd_sub})) <= 200
    assert asyncio.run(store.list_sessions("another project")) == []
