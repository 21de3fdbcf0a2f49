"""``submit`` and workers on Redis and on object storage, as on PostgreSQL: a submitted run is
claimed once under a fresh fence, racing claimers never share a run, and a worker runs what was
submitted to completion."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "s3"))

from s3test import endpoint, new_bucket, store_url

from unbroken import Agent, ScriptedModel
from unbroken.errors import TaskMismatch
from unbroken.stores import open_store
from unbroken.stores.base import Store
from unbroken.worker import Worker

FINAL = {"content": [{"type": "text", "text": "done"}], "stop_reason": "end_turn", "usage": {}}


@pytest.fixture(params=["redis", "s3"])
def store(request: pytest.FixtureRequest) -> Iterator[Store]:
    if request.param == "redis":
        url = request.getfixturevalue("redis_url")
    else:
        server = endpoint()
        url = store_url(server, new_bucket(server))
    with open_store(url) as opened:
        yield opened


def test_a_submitted_run_is_claimed_once_with_its_task_and_a_fresh_fence(store: Store) -> None:
    store.submit("write the report", "r1", agent="app:triage")

    claimed = store.claim_runnable("w1", 30, agent="app:triage")

    assert [(c.run_id, c.task, c.agent, c.lease.owner) for c in claimed] == [
        ("r1", "write the report", "app:triage", "w1")
    ]
    assert store.claim_runnable("w2", 30) == []
    lease = store.lease_of("r1")
    assert lease is not None and lease.fence == claimed[0].lease.fence


def test_submitting_the_same_run_twice_is_harmless_but_another_task_is_refused(store: Store) -> None:
    store.submit("t", "r1")
    store.submit("t", "r1")

    with pytest.raises(TaskMismatch):
        store.submit("other task", "r1")
    assert len(store.claim_runnable("w", 30, limit=10)) == 1


def test_concurrent_claimers_never_get_the_same_run(store: Store) -> None:
    for i in range(12):
        store.submit("t", f"r{i}")
    got: list[str] = []
    guard = threading.Lock()
    barrier = threading.Barrier(3)

    def claimer(name: str) -> None:
        barrier.wait()
        while claimed := store.claim_runnable(name, 30, limit=2):
            with guard:
                got.extend(c.run_id for c in claimed)

    threads = [threading.Thread(target=claimer, args=(f"w{i}",)) for i in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)

    assert sorted(got) == sorted(f"r{i}" for i in range(12))


def test_a_worker_runs_every_submitted_run_to_completion(store: Store) -> None:
    run_ids = [store.submit(f"task {i}") for i in range(4)]

    def factory(on: Store) -> Agent:
        return Agent(ScriptedModel([FINAL]), [], on, lease_ttl=30)

    stats = Worker(factory, store, concurrency=2, poll_interval=0.05).run(until_idle=True)

    assert stats.claimed == 4 and stats.finished == 4 and stats.errors == 0
    assert {run_id: store.load(run_id).phase for run_id in run_ids} == dict.fromkeys(run_ids, "completed")
    assert store.claim_runnable("w", 30, limit=10) == []


def test_a_finished_run_is_not_claimed_again(store: Store) -> None:
    store.submit("t", "r1")
    (claim,) = store.claim_runnable("w1", 30)
    result = Agent(ScriptedModel([FINAL]), [], store, lease_ttl=30).run("t", run_id="r1", owner="w1")
    store.release_lease(claim.lease)

    assert result.status == "completed"
    assert store.claim_runnable("w2", 30, limit=5) == []
