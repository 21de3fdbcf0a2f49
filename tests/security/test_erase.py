"""`unbroken erase` / `ops.erase` removes a run and every copy of its data on every store: after
it, no byte of a marker the run held is left in what the store keeps (the SQLite file and its
WAL, the file store's files, PostgreSQL's tables, Redis's keys, the S3 bucket's objects)."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pgtest
import pytest
import redis as redis_client
import redistest
import s3test
from click.testing import CliRunner

from unbroken import Agent, LeaseHeld, RunNotFound, ScriptedModel, Store, open_store, ops, tool
from unbroken.cli import main


@dataclass
class Place:
    url: str
    raw: Callable[[], bytes]
    """Every byte the store keeps, concatenated (b"" where there is nothing to read)."""


def _files_under(root: Path) -> bytes:
    return b"".join(path.read_bytes() for path in sorted(root.rglob("*")) if path.is_file())


@pytest.fixture(params=["sqlite", "file", "memory", "postgres", "redis", "s3"])
def place(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Place]:
    kind = request.param
    if kind == "sqlite":
        db = tmp_path / "runs.db"
        # keep_recent/pack_batch small: the run's older saves are packed (rows moved, then deleted)
        yield Place(f"sqlite:///{db}?keep_recent=2&pack_batch=2", lambda: _files_under(tmp_path))
    elif kind == "file":
        yield Place(f"file://{tmp_path / 'store'}", lambda: _files_under(tmp_path / "store"))
    elif kind == "memory":
        yield Place("memory://", lambda: b"")
    elif kind == "postgres":
        with pgtest.fresh_schema() as (schema, url):

            def tables() -> bytes:
                with pgtest.connect(schema) as conn:
                    names = [
                        row[0]
                        for row in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = %s", (schema,))
                    ]
                    return b"".join(
                        str(row[0]).encode()
                        for name in names
                        for row in conn.execute(f'SELECT t::text FROM "{name}" t')
                    )

            yield Place(url, tables)
    elif kind == "redis":
        redistest.require_server()
        prefix = f"ubt-{uuid.uuid4().hex[:12]}"
        client = redis_client.Redis.from_url(redistest.server_url())

        def keys() -> bytes:
            # Each value read as itself, not DUMPed: DUMP may LZF-compress a string, hiding a marker.
            return b"".join(key + _redis_value(client, key) for key in client.scan_iter(match=f"{prefix}:*"))

        yield Place(redistest.store_url(redistest.server_url(), prefix), keys)
        redistest.drop_prefix(redistest.server_url(), prefix)
        client.close()
    else:
        endpoint = s3test.endpoint()
        bucket = s3test.new_bucket(endpoint)
        s3 = s3test.client(endpoint)

        def objects() -> bytes:
            listed = s3.list_objects_v2(Bucket=bucket).get("Contents", [])
            return b"".join(s3.get_object(Bucket=bucket, Key=item["Key"])["Body"].read() for item in listed)

        yield Place(s3test.store_url(endpoint, bucket), objects)


def _redis_value(client: Any, key: bytes) -> bytes:
    kind = client.type(key)
    if kind == b"string":
        return bytes(client.get(key) or b"")
    if kind == b"hash":
        return b"".join(k + v for k, v in client.hgetall(key).items())
    if kind == b"list":
        return b"".join(client.lrange(key, 0, -1))
    if kind == b"set":
        return b"".join(client.smembers(key))
    if kind == b"zset":
        return b"".join(member for member, _ in client.zrange(key, 0, -1, withscores=True))
    return bytes(client.dump(key) or b"")


def hold_a_marker(store: Store, marker: str) -> None:
    """Run "victim" (the marker in its task, a model text, a tool input and result, the ledger
    and business_state), fork it, keep a damaged copy of it, and run an unrelated "bystander"."""

    @tool(effect="side_effect")
    def note(text: str) -> str:
        """Write a note."""
        return f"noted {text}"

    def turn(text: str) -> list[dict[str, Any]]:
        call = {"type": "tool_use", "id": "t1", "name": "note", "input": {"text": text}}
        return [
            {"content": [{"type": "text", "text": text}, call], "stop_reason": "tool_use", "usage": {}},
            {"content": [{"type": "text", "text": "done " + text}], "stop_reason": "end_turn", "usage": {}},
        ]

    Agent(ScriptedModel(turn(marker)), tools=[note], store=store).run(
        f"remember {marker}", run_id="victim", business_state={"secret": marker}
    )
    ops.fork(store, "victim", at=2)
    ops.fork(store, "victim", at=3, new_run_id="victim.damaged-9")  # stands for recover's copy
    Agent(ScriptedModel(turn("hello")), tools=[note], store=store).run("unrelated", run_id="bystander")


def test_erase_with_forks_leaves_no_byte_of_the_run(place: Place) -> None:
    marker = f"MARKER-{uuid.uuid4().hex}"
    with open_store(place.url) as store:
        hold_a_marker(store, marker)
        if place.url != "memory://":
            assert marker.encode() in place.raw()  # the check below can fail
        done = ops.erase(store, "victim", with_forks=True)
        assert sorted(done.removed) == ["victim", "victim.damaged-9", "victim.fork-2"]
        assert done.ledger_entries >= 1
        for run_id in done.removed:
            assert not store.exists(run_id) and store.ledger_list(run_id) == []
        assert store.load("bystander").phase == "completed"
        with pytest.raises(RunNotFound):
            ops.erase(store, "victim")
        assert marker.encode() not in place.raw()  # with the store open: its WAL too
    assert marker.encode() not in place.raw()


def test_erase_without_forks_removes_the_damaged_copies_and_names_the_forks_it_kept(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    with open_store(url) as store:
        hold_a_marker(store, "m")
    result = CliRunner().invoke(main, ["erase", "victim", "--yes", "--store", url])
    assert result.exit_code == 0, result.output
    assert "victim, victim.damaged-9" in result.stdout and "kept: victim.fork-2" in result.stdout
    with open_store(url) as store:
        assert not store.exists("victim") and not store.exists("victim.damaged-9")
        assert store.exists("victim.fork-2")


def test_erase_asks_before_it_erases(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    with open_store(url) as store:
        hold_a_marker(store, "m")
    result = CliRunner().invoke(main, ["erase", "victim", "--store", url], input="n\n")
    assert result.exit_code != 0
    with open_store(url) as store:
        assert store.exists("victim")


def test_a_live_run_is_not_erased(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    with open_store(url) as store:
        hold_a_marker(store, "m")
    with open_store(url) as store:
        store.acquire_lease("victim", f"another-host:{os.getpid() + 1}:0:x::", 60.0)
        with pytest.raises(LeaseHeld):
            ops.erase(store, "victim")
        assert store.exists("victim") and store.exists("victim.damaged-9")
