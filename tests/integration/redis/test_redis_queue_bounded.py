"""With 100,000 queued runs (and 5,000 started) on Redis, a page of the queue costs a page (issue 23 item 6).

A ``redis-server`` of the module's own is filled as the store's submission script fills it
(pipelined), then each read is measured on the server: the commands it ran (``INFO
commandstats``, which counts the commands a script runs too) and the bytes it sent back
(``total_net_output_bytes``), and in this process the memory the read allocated at its peak
(``tracemalloc``). Reading the whole queue would be 100,000 rows: several MB sent, one HGETALL
or ZRANGE of every member. No timing is asserted (``make bench`` times the first page)."""

from __future__ import annotations

import json
import tracemalloc
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest
import redis
from redistest import DurableRedis, store_url

from unbroken import ops
from unbroken.stores import open_store
from unbroken.stores.redis import RedisStore

QUEUED = 100_000
STARTED = 5_000
PREFIX = "crowded"
T = TypeVar("T")


@dataclass(frozen=True)
class Cost:
    commands: int
    """Commands the server ran (scripts' own commands included), INFO and CONFIG left out."""
    sent: int
    """Bytes the server sent back."""
    peak: int
    """Bytes this process allocated at its peak."""
    scripts: int = 0
    """Scripts the server ran (each a round trip of its own)."""


def fill(store: RedisStore, count: int, *, start: float = 1_000.0) -> None:
    """Queue ``count`` runs ``q-000000``... one second apart, written as the store's submission
    script writes them (``ADD_SUBMISSION``: the submission by run id, the run in the queue by
    time), 10,000 at a time."""
    for first in range(0, count, 10_000):
        numbers = range(first, min(first + 10_000, count))
        bodies = {
            f"q-{n:06d}": json.dumps({"task": f"task {n}", "agent": "agents:make", "submitted_at": start + n})
            for n in numbers
        }
        pipe = store.backend._client.pipeline(transaction=False)
        pipe.hset(store.backend._key("subs"), mapping=bodies)  # type: ignore[arg-type]
        pipe.zadd(store.backend._key("queue"), {f"q-{n:06d}": start + n for n in numbers})
        pipe.execute()


def fill_started(store: RedisStore, count: int) -> None:
    """``count`` runs ``s-00000``... that have saved (a head with a summary, in the runs set),
    written as the store's save script writes a head."""
    pipe = store.backend._client.pipeline(transaction=False)
    for n in range(count):
        fields: dict[str, str | float] = {"seq": 3, "fence": 1, "owner": "", "expires": "0.0", "task": f"started {n}"}
        fields.update(phase="running", turns=1, tokens=10, updated=500.0 + n)
        pipe.hset(store.backend._key("head", f"s-{n:05d}"), mapping=fields)  # type: ignore[arg-type]
    pipe.zadd(store.backend._key("runs"), {f"s-{n:05d}": 500.0 + n for n in range(count)})
    pipe.execute()


@pytest.fixture(scope="module")
def crowded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RedisStore, redis.Redis]]:
    server = DurableRedis(Path(tmp_path_factory.mktemp("crowded-redis")))
    server.extra_args = ["--appendonly", "no"]  # memory only: the fill is 100,000 writes
    server.start()
    store = open_store(store_url(server.url, PREFIX, "none"))
    assert isinstance(store, RedisStore)
    fill(store, QUEUED)
    fill_started(store, STARTED)
    admin = redis.Redis(port=server.port)
    yield store, admin
    admin.close()
    store.close()
    server.stop()


def measured(admin: redis.Redis, action: Callable[[], T]) -> tuple[T, Cost]:
    admin.config_resetstat()
    before = int(admin.info("stats")["total_net_output_bytes"])
    tracemalloc.start()
    try:
        result = action()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    after = int(admin.info("stats")["total_net_output_bytes"])
    stats: dict[str, Any] = admin.info("commandstats")
    commands = sum(
        int(row["calls"]) for name, row in stats.items() if not name.startswith(("cmdstat_info", "cmdstat_config"))
    )
    scripts = sum(int(row["calls"]) for name, row in stats.items() if name in ("cmdstat_evalsha", "cmdstat_eval"))
    return result, Cost(commands, after - before - _info_reply_bytes(admin), peak, scripts)


def _info_reply_bytes(admin: redis.Redis) -> int:
    """What one ``INFO stats`` reply itself adds to the output counter (measured between two)."""
    first = int(admin.info("stats")["total_net_output_bytes"])
    second = int(admin.info("stats")["total_net_output_bytes"])
    return second - first


def test_the_first_page_of_runs_reads_a_page_of_the_queue(crowded: tuple[RedisStore, redis.Redis]) -> None:
    store, admin = crowded
    page, cost = measured(admin, lambda: ops.runs_page(store, limit=50))

    assert [run.run_id for run in page.queued] == [f"q-{n:06d}" for n in range(50)]
    assert page.queued_next == (1_049.0, "q-000049")
    # A page of the queue (64 members), their submissions and heads, each queued run's head
    # (parked?), the runs listing: a few hundred commands, some tens of KB, never the 100,000.
    assert cost.commands < 400, cost
    assert cost.sent < 64_000, cost
    assert cost.peak < 2_000_000, cost


def test_the_next_page_starts_after_the_cursor_and_costs_the_same(crowded: tuple[RedisStore, redis.Redis]) -> None:
    store, admin = crowded
    page, cost = measured(admin, lambda: ops.queued_page(store, limit=50, after=(60_000.0, "q-059000")))

    assert [run.run_id for run in page.runs][:2] == ["q-059001", "q-059002"] and len(page.runs) == 50
    assert cost.commands < 400 and cost.sent < 64_000, cost


def test_show_of_a_queued_run_reads_that_run(crowded: tuple[RedisStore, redis.Redis]) -> None:
    store, admin = crowded
    found, cost = measured(admin, lambda: ops.queued_run(store, "q-099999"))

    assert found is not None and found.task == "task 99999" and not found.lost
    assert cost.commands < 10 and cost.sent < 2_000, cost


def test_a_claim_reads_the_head_of_the_queue(crowded: tuple[RedisStore, redis.Redis]) -> None:
    store, admin = crowded
    claimed, cost = measured(admin, lambda: store.claim_runnable("worker-a", 60.0, agent="agents:make", limit=2))

    assert [run.run_id for run in claimed] == ["q-000000", "q-000001"]
    assert cost.commands < 250 and cost.sent < 64_000 and cost.peak < 2_000_000, cost
    for run in claimed:
        store.release_lease(run.lease)


def test_the_phase_of_a_run_is_one_read(crowded: tuple[RedisStore, redis.Redis]) -> None:
    store, admin = crowded
    phase, cost = measured(admin, lambda: store.backend.phase_of("s-01000"))
    queued, queued_cost = measured(admin, lambda: store.backend.phase_of("q-050000"))

    assert (phase, queued) == ("running", None)  # a queued run has no phase: never saved
    assert cost.commands <= 2 and cost.sent < 500, cost
    assert queued_cost.commands <= 2 and queued_cost.sent < 500, queued_cost


def test_a_page_after_a_run_that_left_the_queue_goes_on_from_its_time(
    crowded: tuple[RedisStore, redis.Redis],
) -> None:
    store, admin = crowded
    page, cost = measured(admin, lambda: store.backend.unstarted_page((70_000.0, "q-069000x"), 3))

    assert [item.run_id for item in page] == ["q-069001", "q-069002", "q-069003"]
    assert cost.commands < 250 and cost.sent < 64_000, cost


def test_a_claim_passes_over_running_runs_a_page_at_a_time(crowded: tuple[RedisStore, redis.Redis]) -> None:
    store, admin = crowded
    busy = open_store(store.url.replace(f"prefix={PREFIX}", "prefix=busy"))
    assert isinstance(busy, RedisStore)
    fill(busy, 5_000)
    held_until = busy.lease_now() + 600.0
    pipe = busy.backend._client.pipeline(transaction=False)
    for n in range(4_000):  # the oldest 4,000 are being run by other workers
        fields = {"seq": 0, "fence": 1, "owner": "worker-elsewhere", "expires": repr(held_until)}
        pipe.hset(busy.backend._key("head", f"q-{n:06d}"), mapping=fields)  # type: ignore[arg-type]
    pipe.execute()

    claimed, cost = measured(admin, lambda: busy.claim_runnable("worker-a", 60.0, limit=1))

    assert [run.run_id for run in claimed] == ["q-004000"]
    # 63 pages of 64 (a page script and one pipelined read each) and one claim script: not a
    # claim script (a round trip) per running run
    assert cost.scripts <= 4_000 // 64 + 3, cost
    busy.close()
