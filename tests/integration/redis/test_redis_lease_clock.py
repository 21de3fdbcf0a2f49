"""A lease acquisition on Redis reads the server's clock (TIME) once: its expiry and the fence's
floor (``stores.base.next_fence``) come from the same reading."""

from __future__ import annotations

from typing import Any

import pytest

from unbroken.stores import open_store


def test_a_lease_acquisition_reads_the_server_clock_once(redis_url: str, monkeypatch: Any) -> None:
    with open_store(redis_url) as store:
        backend = store.backend
        readings: list[float] = []
        real = backend.store_time

        def counted() -> float:
            readings.append(real())
            return readings[-1]

        monkeypatch.setattr(backend, "store_time", counted)
        lease = store.acquire_lease("r-clock", "w1", 30)

    assert len(readings) == 1
    assert lease.fence >= int(readings[0] * 1_000_000)
    assert lease.expires_at == pytest.approx(readings[0] + 30)
