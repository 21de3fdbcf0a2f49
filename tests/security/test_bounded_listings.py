"""With 100,000 queued runs, every listing reads a page, not the queue: `unbroken runs`, the
inspector's first page, `show` of a queued run and a worker's claim answer in milliseconds
with a page of rows (before: 100,000 rows in seconds)."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Iterator
from typing import TypeVar

import pytest
from click.testing import CliRunner
from starlette.testclient import TestClient

from unbroken import open_store, ops
from unbroken.cli import main
from unbroken.stores.base import Store
from unbroken.ui.server import create_app

QUEUED = 100_000
T = TypeVar("T")
FAST = 0.25  # seconds; the whole-queue reads took 8 s here


@pytest.fixture(scope="module")
def crowded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    path = tmp_path_factory.mktemp("crowded") / "runs.db"
    url = f"sqlite:///{path}"
    open_store(url).close()
    with sqlite3.connect(path) as conn:  # a bulk insert: submitting them one by one would take minutes
        conn.executemany(
            "INSERT INTO unbroken_queue (run_id, task, agent, submitted_at) VALUES (?, ?, ?, ?)",
            ((f"q-{n:06d}", f"task {n}", "agents:make", 1_000.0 + n) for n in range(QUEUED)),
        )
    conn.close()
    yield url


@pytest.fixture
def store(crowded: str) -> Iterator[Store]:
    with open_store(crowded) as opened:
        yield opened


def timed(action: Callable[[], T]) -> tuple[T, float]:
    started = time.perf_counter()
    result = action()
    return result, time.perf_counter() - started


def test_the_first_page_of_runs_is_a_page(store: Store) -> None:
    page, seconds = timed(lambda: ops.runs_page(store, limit=50))
    assert [run.run_id for run in page.queued] == [f"q-{n:06d}" for n in range(50)]
    assert page.queued_next == (1_049.0, "q-000049") and seconds < FAST, seconds


def test_the_next_queued_page_starts_after_the_cursor(store: Store) -> None:
    second = ops.queued_page(store, limit=50, after=(1_049.0, "q-000049"))
    assert second.runs[0].run_id == "q-000050" and len(second.runs) == 50


def test_unbroken_runs_prints_a_page(crowded: str) -> None:
    started = time.perf_counter()
    result = CliRunner().invoke(main, ["runs", "--store", crowded])
    seconds = time.perf_counter() - started
    assert result.exit_code == 0, result.output
    assert result.stdout.count("q-0") == 50 and "oldest queued runs; more" in result.stdout
    assert seconds < 5 * FAST, seconds


def test_the_inspectors_first_page_is_a_page(store: Store) -> None:
    with TestClient(create_app(store)) as client:
        response, seconds = timed(lambda: client.get("/api/runs?limit=50"))
    runs = response.json()["runs"]
    assert len(runs) == 50 and seconds < FAST, seconds


def test_a_queued_run_is_found_by_its_id(store: Store) -> None:
    found, seconds = timed(lambda: ops.queued_run(store, "q-099999"))
    assert found is not None and found.task == "task 99999" and seconds < FAST, seconds


def test_a_worker_claim_reads_a_page_of_the_queue(store: Store) -> None:
    claimed, seconds = timed(lambda: store.claim_runnable("worker-1", 30.0, agent="agents:make", limit=2))
    assert [run.run_id for run in claimed] == ["q-000000", "q-000001"]
    assert seconds < FAST, seconds
    for run in claimed:
        store.release_lease(run.lease)
