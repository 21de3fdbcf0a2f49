"""Why ``arun`` hands store work to threads instead of a native async driver (issue 24 goal 2).

    python benchmarks/bench_async_driver.py

The driver's own ceiling, without unbroken: 200 concurrent tasks make 12 autocommitted INSERTs of
2.4 KB each over a pool of 4 connections, (a) with psycopg's ``AsyncConnectionPool`` on the event
loop, (b) with the sync ``ConnectionPool`` reached through 4 threads (``run_in_executor``, as
``stores.offload`` does), while a ticker measures the loop's lag. Printed, not judged.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor

import psycopg
from psycopg_pool import AsyncConnectionPool, ConnectionPool

URL = os.environ.get("UNBROKEN_TEST_POSTGRES_URL") or "postgresql://postgres@127.0.0.1:5432/test"
TABLE = f"bench_driver_{uuid.uuid4().hex[:8]}"
ROW = "x" * 2400
TASKS, INSERTS, POOL = 200, 12, 4
INSERT = f"INSERT INTO {TABLE} (run, body) VALUES (%s, %s)"


async def _timed(work: Callable[[int], Awaitable[None]]) -> tuple[float, float]:
    lags: list[float] = []
    done = asyncio.Event()

    async def ticker() -> None:
        while not done.is_set():
            began = time.perf_counter()
            await asyncio.sleep(0.001)
            lags.append(time.perf_counter() - began - 0.001)

    ticking = asyncio.create_task(ticker())
    began = time.perf_counter()
    await asyncio.gather(*(work(n) for n in range(TASKS)))
    seconds = time.perf_counter() - began
    done.set()
    await ticking
    return TASKS * INSERTS / seconds, statistics.quantiles(lags, n=100)[98]


async def native() -> tuple[float, float]:
    pool = AsyncConnectionPool(URL, min_size=POOL, max_size=POOL, kwargs={"autocommit": True}, open=False)
    await pool.open(wait=True)

    async def run(n: int) -> None:
        for _ in range(INSERTS):
            async with pool.connection() as conn:
                await conn.execute(INSERT, (f"a{n}", ROW))

    try:
        return await _timed(run)
    finally:
        await pool.close()


async def threads() -> tuple[float, float]:
    pool = ConnectionPool(URL, min_size=POOL, max_size=POOL, kwargs={"autocommit": True}, open=True)
    pool.wait()
    executor = ThreadPoolExecutor(POOL)
    loop = asyncio.get_running_loop()

    def one(n: int) -> None:
        with pool.connection() as conn:
            conn.execute(INSERT, (f"t{n}", ROW))

    async def run(n: int) -> None:
        for _ in range(INSERTS):
            await loop.run_in_executor(executor, one, n)

    try:
        return await _timed(run)
    finally:
        pool.close()
        executor.shutdown()


def main() -> None:
    with psycopg.connect(URL, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {TABLE} (id bigserial PRIMARY KEY, run text, body text)")
    try:
        for _ in range(2):
            for name, way in (("psycopg AsyncConnectionPool", native), (f"sync pool + {POOL} threads", threads)):
                rate, lag = asyncio.run(way())
                print(f"{name}: {rate:,.0f} INSERTs/s, event-loop lag p99 {lag * 1e3:.2f} ms")
    finally:
        with psycopg.connect(URL, autocommit=True) as conn:
            conn.execute(f"DROP TABLE {TABLE}")


if __name__ == "__main__":
    main()
