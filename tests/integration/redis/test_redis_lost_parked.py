"""A real ``redis-server`` brought back from an older copy of its files under a running worker
(a restore of last night's backup, or a fail-over to a replica that lagged): the run's queue
entry survives, its head and records do not. The worker that finds the loss parks the run, and
no worker, a freshly started one included, claims it again or charges the card twice."""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from redistest import DurableRedis, store_url

from unbroken import Agent, ScriptedModel, lost, ops, tool
from unbroken.stores import open_store
from unbroken.stores.base import Store
from unbroken.worker import Worker

PREFIX = "parked"
FINAL: dict[str, Any] = {"content": [{"type": "text", "text": "done"}], "stop_reason": "end_turn", "usage": {}}


@pytest.fixture
def server(tmp_path: Path) -> Iterator[DurableRedis]:
    started = DurableRedis(tmp_path / "redis")
    started.start()
    yield started
    started.stop()


def charging_agent(store: Store, charged: list[int], on_charge: Any = None) -> Agent:
    @tool(effect="side_effect")
    def charge(cents: int) -> str:
        charged.append(cents)
        if on_charge is not None:
            on_charge(len(charged))
        return "charged"

    turns = [
        {"content": [{"type": "tool_use", "id": f"t{n}", "name": "charge", "input": {"cents": 100 + n}}], "usage": {}}
        for n in range(3)
    ]
    return Agent(ScriptedModel([*turns, FINAL]), [charge], store, lease_ttl=60.0)


def test_a_worker_parks_a_run_whose_redis_came_back_from_an_older_copy(server: DurableRedis, tmp_path: Path) -> None:
    url = store_url(server.url, PREFIX, "full") + "&retry_for=20"
    store = open_store(url)
    store.submit("charge three times", "r1")
    backup = tmp_path / "backup"
    shutil.copytree(server.directory, backup)  # appendfsync always: the copy holds the submission

    def restore_backup(count: int) -> None:
        if count == 1:
            server.kill()
            shutil.rmtree(server.directory)
            shutil.copytree(backup, server.directory)
            server.start()

    charged: list[int] = []
    first = Worker(lambda s: charging_agent(s, charged, restore_backup), store, retry_after=0.2, poll_interval=0.05)
    lost_stats = first.run(until_idle=True, max_runs=1)
    time.sleep(0.3)  # past retry_after: a mere hold would have expired by now
    with open_store(url) as other:  # a worker process that never saw the run saved
        fresh = Worker(lambda s: charging_agent(s, charged), other, retry_after=0.2, poll_interval=0.05)
        fresh_stats = fresh.run(until_idle=True, max_runs=2)
        queued = ops.queued_run(other, "r1")

    assert lost_stats.data_lost == 1
    assert fresh_stats.claimed == 0
    assert charged == [100]  # the card was charged once
    assert queued is not None and queued.phase == "data_lost"
    assert lost.is_parked(store.backend.read_head("r1"))
    store.close()
