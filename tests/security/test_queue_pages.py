"""Queued runs a page at a time, on every store that queues runs: pages follow each other in
submission order, started runs are left out, a queued run is found by its id, and claims take
the oldest runnable submissions first."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pgtest
import pytest
import redistest
import s3test

from unbroken import Agent, ScriptedModel, Store, open_store, ops

FINAL = {"content": [{"type": "text", "text": "done"}], "stop_reason": "end_turn", "usage": {}}


@pytest.fixture(params=["sqlite", "memory", "postgres", "redis", "s3"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    kind = request.param
    if kind == "sqlite":
        with open_store(f"sqlite:///{tmp_path / 'runs.db'}") as opened:
            yield opened
    elif kind == "memory":
        with open_store("memory://") as opened:
            yield opened
    elif kind == "postgres":
        with pgtest.fresh_schema() as (_, url), open_store(url) as opened:
            yield opened
    elif kind == "redis":
        redistest.require_server()
        prefix = f"ubt-{uuid.uuid4().hex[:12]}"
        with open_store(redistest.store_url(redistest.server_url(), prefix)) as opened:
            yield opened
        redistest.drop_prefix(redistest.server_url(), prefix)
    else:
        endpoint = s3test.endpoint()
        with open_store(s3test.store_url(endpoint, s3test.new_bucket(endpoint))) as opened:
            yield opened


def test_queued_runs_come_a_page_at_a_time_oldest_first(store: Store) -> None:
    ids = [f"q-{n}" for n in range(7)]
    for run_id in ids:
        store.submit(f"task {run_id}", run_id, agent="a")
        time.sleep(0.002)  # distinct submission times
    for started in ("q-1", "q-4"):
        Agent(ScriptedModel([FINAL]), store=store).run(f"task {started}", run_id=started)
    seen: list[str] = []
    after = None
    for _ in range(10):
        page = ops.queued_page(store, limit=2, after=after)
        assert len(page.runs) <= 2
        seen += [run.run_id for run in page.runs]
        if page.next is None:
            break
        after = page.next
    assert seen == ["q-0", "q-2", "q-3", "q-5", "q-6"]
    found = ops.queued_run(store, "q-6")
    assert found is not None and found.task == "task q-6" and found.agent == "a"
    assert ops.queued_run(store, "q-1") is None  # started: not queued any more
    first = ops.runs_page(store, limit=2)
    assert [run.run_id for run in first.queued] == ["q-0", "q-2"] and first.queued_next is not None


def test_claims_take_the_oldest_runnable_first(store: Store) -> None:
    for n in range(5):
        store.submit(f"task {n}", f"c-{n}", agent="a")
        time.sleep(0.002)
    Agent(ScriptedModel([FINAL]), store=store).run("task 0", run_id="c-0")  # finished: never claimed
    claimed = store.claim_runnable("w", 30.0, agent="a", limit=2)
    assert [run.run_id for run in claimed] == ["c-1", "c-2"]
    again = store.claim_runnable("w2", 30.0, agent="a", limit=5)
    assert [run.run_id for run in again] == ["c-3", "c-4"]  # the leased ones are skipped
