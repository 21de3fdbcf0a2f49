"""Durability on Redis is the server's: the store reads the server's persistence settings at open,
refuses to promise more than they give, and with ``appendfsync always`` nothing acknowledged is
lost when ``redis-server`` itself is SIGKILLed and restarted."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from redistest import DurableRedis, store_url

from unbroken.codec import Encoder
from unbroken.errors import InsufficientDurability
from unbroken.state import LedgerEntry, RunState, idempotency_key
from unbroken.stores import open_store
from unbroken.stores.redis import RedisStore


def test_durability_full_is_refused_on_a_server_without_an_append_only_file(redis_url: str) -> None:
    with pytest.raises(InsufficientDurability) as refused:
        open_store(redis_url.replace("durability=none", "durability=full"))

    assert "appendonly=no" in str(refused.value)
    assert "appendfsync always" in str(refused.value)


def test_durability_full_is_the_default(redis_url: str) -> None:
    with pytest.raises(InsufficientDurability):
        open_store(redis_url.replace("&durability=none", ""))


def test_everysec_is_enough_for_normal_but_not_for_full(tmp_path: Path) -> None:
    server = DurableRedis(tmp_path / "redis", appendfsync="everysec")
    server.start()
    try:
        with pytest.raises(InsufficientDurability) as refused:
            open_store(store_url(server.url, "t", "full"))
        with open_store(store_url(server.url, "t", "normal")) as store:
            declared = store.durability
    finally:
        server.stop()

    assert "appendfsync=everysec" in str(refused.value)
    assert declared == "process_crash"


def test_a_server_without_an_append_only_file_is_refused_for_normal(redis_url: str) -> None:
    with pytest.raises(InsufficientDurability):
        open_store(redis_url.replace("durability=none", "durability=normal"))


def test_appendfsync_always_is_accepted_for_full_and_declared_power_loss_safe(durable_redis: DurableRedis) -> None:
    with open_store(store_url(durable_redis.url, "t", "full")) as store:
        assert store.durability == "power_loss"


class Writer:
    """Saves one run over and over (each save with a ledger entry) and keeps what was
    acknowledged: the seq of every save whose append returned, every ledger key whose put did."""

    def __init__(self, url: str, run_id: str) -> None:
        self.store = RedisStore(url)
        self.run_id = run_id
        self.state = RunState(run_id=run_id, task="durability", created_at=1.0, updated_at=1.0)
        self.encoder = Encoder()
        self.acked_saves: list[tuple[int, str]] = []
        self.acked_entries: list[str] = []
        self.errors: list[BaseException] = []
        self.stop = threading.Event()

    def save_once(self) -> None:
        step = self.state.save_seq + 1
        self.state.messages.append({"role": "user", "content": f"message {step}"})
        self.state.save_seq = step
        entry = LedgerEntry(self.run_id, idempotency_key(self.run_id, f"c{step}"), f"c{step}", "t", "h", "pending")
        encoded = self.encoder.encode(self.state, f"save {step}", ledger=[entry])
        self.store.append(encoded, expect_seq=step - 1)
        self.encoder.committed(self.state, encoded)
        self.acked_saves.append((step, encoded.checksum))
        done = LedgerEntry(self.run_id, idempotency_key(self.run_id, f"d{step}"), f"d{step}", "t", "h", "succeeded")
        self.store.ledger_put(done)
        self.acked_entries += [entry.key, done.key]

    def loop(self) -> None:
        try:
            while not self.stop.is_set():
                self.save_once()
        except BaseException as exc:  # reported by the test
            self.errors.append(exc)


def test_a_sigkilled_redis_server_loses_no_acknowledged_save_or_ledger_write(durable_redis: DurableRedis) -> None:
    url = store_url(durable_redis.url, "durable", "full") + "&retry_for=30"
    writer = Writer(url, "run-durable")
    thread = threading.Thread(target=writer.loop)
    thread.start()
    try:
        for _ in range(3):  # kill the server mid-stream three times; the store retries meanwhile
            seen = len(writer.acked_saves)
            deadline = time.monotonic() + 20
            while len(writer.acked_saves) < seen + 25 and time.monotonic() < deadline and not writer.errors:
                time.sleep(0.01)
            durable_redis.kill()
            time.sleep(0.2)
            durable_redis.start()
        time.sleep(0.3)
    finally:
        writer.stop.set()
        thread.join(timeout=60)
        writer.store.close()
    acked_saves, acked_entries = list(writer.acked_saves), list(writer.acked_entries)
    durable_redis.kill()  # and once more right after the last acknowledgement
    durable_redis.start()

    assert writer.errors == []
    assert len(acked_saves) >= 75
    with open_store(url) as reopened:
        stored = {record.seq: record.checksum for record in reopened.read_records("run-durable")}
        state = reopened.load("run-durable")
        missing_entries = [key for key in acked_entries if reopened.ledger_get("run-durable", key) is None]
    assert [seq for seq, check in acked_saves if stored.get(seq) != check] == []
    assert state.save_seq >= acked_saves[-1][0]
    assert missing_entries == []


def test_a_server_without_an_append_only_file_loses_acknowledged_saves_when_killed(tmp_path: Path) -> None:
    """Why durability=full refuses such a server: the same kill as above loses the run."""
    server = DurableRedis(tmp_path / "redis", appendfsync="always")
    server.extra_args = ["--appendonly", "no"]
    server.start()
    try:
        url = store_url(server.url, "volatile", "none")
        writer = Writer(url, "run-volatile")
        for _ in range(5):
            writer.save_once()
        writer.store.close()
        server.kill()
        server.start()
        with open_store(url) as reopened:
            assert not reopened.exists("run-volatile")
    finally:
        server.stop()
