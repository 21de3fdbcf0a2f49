"""``Agent.arun`` on Redis: every store call in the store's own threads, never on the event loop,
and as many threads at once as the store's connection pool holds (issue 24 goal 2)."""

from __future__ import annotations

import asyncio
import threading

import pytest

from faults_kit.store_threads import arun_many
from unbroken.errors import InvalidStoreURL
from unbroken.stores.offload import executor, off_loop
from unbroken.stores.redis import RedisStore


def test_concurrent_aruns_on_redis_never_call_the_store_on_the_loop(redis_url: str) -> None:
    store = RedisStore(redis_url)
    try:
        threads, statuses, charges = arun_many(store, 8)
    finally:
        store.close()
    assert statuses == ["completed"] * 8
    assert sorted(charges) == list(range(8))
    assert threads.calls and threads.on_loop() == []


def test_redis_store_threads_hold_pool_size_connections_at_once(redis_url: str) -> None:
    store = RedisStore(f"{redis_url}&pool_size=3")
    pool = store.backend._client.connection_pool
    together = threading.Barrier(3, timeout=2.0)

    def hold_a_connection() -> int:
        connection = pool.get_connection()
        try:
            return together.wait()
        finally:
            pool.release(connection)

    async def main() -> list[int]:
        return await asyncio.gather(*(off_loop(store, hold_a_connection) for _ in range(3)))

    try:
        assert store.concurrency == 3 and executor(store)._max_workers == 3
        assert sorted(asyncio.run(main())) == [0, 1, 2]
    finally:
        store.close()


def test_a_redis_pool_size_that_is_not_a_whole_number_is_refused(redis_url: str) -> None:
    with pytest.raises(InvalidStoreURL, match="pool_size"):
        RedisStore(f"{redis_url}&pool_size=many")
