"""A Redis that can lose runs is refused, and a run it loses anyway is told as lost, never restarted.

Issue 21 item 3, on real ``redis-server`` processes this test starts: a server that evicts any key
under memory pressure (``maxmemory-policy allkeys-lru``, a Redis shared with a cache) is refused at
open and at every lease acquisition; a server restarted without its data, or emptied by another
application's memory use, under a live holder raises ``StoreDataLost`` (not ``LeaseLost``), and
``Agent.resume`` / ``unbroken resume`` then raise ``RunNotFound`` instead of starting over.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from click.testing import CliRunner
from redistest import DurableRedis, store_url

from unbroken import Agent, ScriptedModel, tool
from unbroken.cli import main
from unbroken.errors import InsufficientDurability, LeaseLost, RunNotFound, StoreDataLost
from unbroken.stores import open_store
from unbroken.stores.base import Store
from unbroken.stores.redis import RedisStore
from unbroken.testing.contract._support import RunWriter, ledger_entry

PREFIX = "lost"
CHARGES = 6


def _server(tmp_path: Path, *extra: str) -> DurableRedis:
    server = DurableRedis(tmp_path / "redis")
    server.extra_args = list(extra)
    server.start()
    return server


@pytest.fixture
def lru_redis(tmp_path: Path) -> Iterator[DurableRedis]:
    """A server shared with a cache: 8 MB, and any key may be evicted (``allkeys-lru``)."""
    server = _server(tmp_path, "--maxmemory", "8mb", "--maxmemory-policy", "allkeys-lru")
    yield server
    server.stop()


@pytest.fixture
def empty_on_restart_redis(tmp_path: Path) -> Iterator[DurableRedis]:
    """A server that keeps nothing on disk: a restart brings it back empty."""
    server = _server(tmp_path, "--appendonly", "no")
    yield server
    server.stop()


def _config_set(server: DurableRedis, name: str, value: str) -> None:
    client = redis.Redis(port=server.port)
    client.config_set(name, value)
    client.close()


def fill_like_another_app(server: DurableRedis) -> int:
    """Write cache entries from another client until no run key is left (memory pressure evicts
    them). Returns how many entries it took."""
    client = redis.Redis(port=server.port)
    try:
        for written in range(1, 20_000):
            client.set(f"cache:{written}", b"x" * 50_000)
            if written % 20 == 0 and not any(True for _ in client.scan_iter(match=f"{PREFIX}:*", count=1000)):
                return written
        raise AssertionError("memory pressure never evicted the run keys")
    finally:
        client.close()


def _charge_turn(index: int) -> dict[str, Any]:
    call = {"type": "tool_use", "id": f"toolu_{index}", "name": "charge", "input": {"cents": 100 + index}}
    return {"content": [call], "stop_reason": "tool_use", "usage": {"input_tokens": 1, "output_tokens": 1}}


FINAL = {"content": [{"type": "text", "text": "charged"}], "stop_reason": "end_turn", "usage": {}}


def charging_agent(store: Store, charged: list[int], after_charge: Callable[[int], object] = lambda n: None) -> Agent:
    """``CHARGES`` turns, one card charge each (a side effect with no probe), then done."""

    @tool(effect="side_effect")
    def charge(cents: int) -> str:
        charged.append(cents)
        after_charge(len(charged))
        return f"charged {cents}"

    script = [_charge_turn(i) for i in range(CHARGES)] + [FINAL]
    return Agent(ScriptedModel(script), [charge], store, lease_ttl=60.0)


# ---------------------------------------------------------------------- the precondition


@pytest.mark.parametrize("level", ["full", "normal", "none"])
def test_an_allkeys_eviction_policy_is_refused_at_every_durability_level(lru_redis: DurableRedis, level: str) -> None:
    with pytest.raises(InsufficientDurability) as refused:
        open_store(store_url(lru_redis.url, PREFIX, level))

    message = str(refused.value)
    assert "maxmemory-policy=allkeys-lru" in message
    assert "noeviction" in message


@pytest.mark.parametrize("policy", ["noeviction", "volatile-lru", "volatile-ttl"])
def test_policies_that_never_evict_a_key_without_ttl_are_accepted(lru_redis: DurableRedis, policy: str) -> None:
    _config_set(lru_redis, "maxmemory-policy", policy)

    with open_store(store_url(lru_redis.url, PREFIX, "full")) as store:
        assert store.durability == "power_loss"


def test_a_policy_changed_on_the_live_server_refuses_the_next_lease_and_claim(lru_redis: DurableRedis) -> None:
    _config_set(lru_redis, "maxmemory-policy", "noeviction")
    store = RedisStore(store_url(lru_redis.url, PREFIX, "full"))
    store.submit("a queued task", "run-queued")
    _config_set(lru_redis, "maxmemory-policy", "allkeys-lfu")  # CONFIG SET on the running server
    charged: list[int] = []

    with pytest.raises(InsufficientDurability, match="maxmemory-policy=allkeys-lfu"):
        store.acquire_lease("run-new", "worker-a", 60.0)
    with pytest.raises(InsufficientDurability):
        store.claim_runnable("worker-a", 60.0)
    with pytest.raises(InsufficientDurability):
        charging_agent(store, charged).run("charge", run_id="run-agent")

    assert charged == []
    assert store.backend.read_head("run-new") is None and store.backend.read_head("run-agent") is None
    assert store.lease_of("run-queued") is None
    store.close()


def test_an_appendfsync_lowered_on_the_live_server_refuses_the_next_lease_at_full(lru_redis: DurableRedis) -> None:
    _config_set(lru_redis, "maxmemory-policy", "noeviction")
    store = RedisStore(store_url(lru_redis.url, PREFIX, "full"))
    _config_set(lru_redis, "appendfsync", "no")

    with pytest.raises(InsufficientDurability, match="appendfsync=no"):
        store.acquire_lease("run-new", "worker-a", 60.0)
    store.close()


def test_a_server_that_hides_its_policy_needs_the_explicit_opt_out(tmp_path: Path) -> None:
    hidden = ("--rename-command", "CONFIG", "", "--rename-command", "INFO", "")
    server = _server(tmp_path, "--appendonly", "no", *hidden)
    try:
        with pytest.raises(InsufficientDurability) as refused:
            open_store(store_url(server.url, PREFIX, "none"))
        with open_store(store_url(server.url, PREFIX, "none") + "&assume_noeviction=yes") as store:
            store.acquire_lease("run-vouched", "worker-a", 60.0)  # re-checked, and still vouched for
    finally:
        server.stop()

    assert "does not say its maxmemory-policy" in str(refused.value)
    assert "assume_noeviction=yes" in str(refused.value)


def test_with_config_disabled_the_policy_is_read_from_info(tmp_path: Path) -> None:
    server = _server(
        tmp_path, "--maxmemory", "8mb", "--maxmemory-policy", "allkeys-random", "--rename-command", "CONFIG", ""
    )
    try:
        with pytest.raises(InsufficientDurability, match="maxmemory-policy=allkeys-random"):
            open_store(store_url(server.url, PREFIX, "none"))
    finally:
        server.stop()


# ---------------------------------------------------------------------- lost data, named


def test_a_live_holder_whose_keys_are_evicted_gets_store_data_lost_and_charges_once(lru_redis: DurableRedis) -> None:
    """The audit's scenario, with the operator vouching wrongly for the server (or the policy
    changed after the lease was taken): another application's memory use evicts the run."""
    store = open_store(store_url(lru_redis.url, PREFIX, "full") + "&assume_noeviction=yes")
    charged: list[int] = []
    agent = charging_agent(store, charged, lambda n: fill_like_another_app(lru_redis) if n == 2 else 0)

    with pytest.raises(StoreDataLost) as lost:
        agent.run("charge six times", run_id="run-evicted")
    with pytest.raises(RunNotFound, match="lost it"):
        agent.resume("run-evicted")

    assert not isinstance(lost.value, LeaseLost)
    assert "run-evicted" in str(lost.value) and "side effects" in str(lost.value)
    assert charged == [100, 101]  # no charge ran twice, none after the loss
    store.close()


def test_a_redis_restarted_empty_under_a_live_holder_is_store_data_lost_not_lease_lost(
    empty_on_restart_redis: DurableRedis,
) -> None:
    server = empty_on_restart_redis
    store = open_store(store_url(server.url, PREFIX, "none") + "&retry_for=20")
    charged: list[int] = []

    def restart_empty(count: int) -> None:
        if count == 3:
            server.kill()
            server.start()

    agent = charging_agent(store, charged, restart_empty)

    with pytest.raises(StoreDataLost, match="head is gone"):
        agent.run("charge six times", run_id="run-restarted")
    with pytest.raises(RunNotFound):
        agent.resume("run-restarted")

    assert charged == [100, 101, 102]
    assert not store.exists("run-restarted")
    store.close()


def test_arun_and_aresume_tell_a_restart_without_data_the_same_way(empty_on_restart_redis: DurableRedis) -> None:
    server = empty_on_restart_redis
    store = open_store(store_url(server.url, PREFIX, "none") + "&retry_for=20")
    charged: list[int] = []

    def restart_empty(count: int) -> None:
        if count == 1:
            server.kill()
            server.start()

    agent = charging_agent(store, charged, restart_empty)

    with pytest.raises(StoreDataLost):
        asyncio.run(agent.arun("charge six times", run_id="run-async"))
    with pytest.raises(RunNotFound):
        asyncio.run(agent.aresume("run-async"))

    assert charged == [100]
    store.close()


def test_unbroken_resume_of_a_run_the_server_lost_exits_with_run_not_found(
    empty_on_restart_redis: DurableRedis, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = empty_on_restart_redis
    url = store_url(server.url, PREFIX, "none")
    agents = tmp_path / "lost_agents.py"
    agents.write_text(
        "from unbroken import Agent, ScriptedModel\n"
        "def build(store):\n"
        "    return Agent(ScriptedModel([{'content': [{'type': 'text', 'text': 'hi'}], 'usage': {}}]), [], store)\n"
    )
    with open_store(url) as store:
        charging_agent(store, []).run("t", run_id="run-cli")  # a run that was saved...
    server.kill()  # ...and a server that comes back without it
    server.start()
    monkeypatch.chdir(tmp_path)

    result = CliRunner().invoke(main, ["resume", "run-cli", "--agent", f"{agents}:build", "--store", url])

    assert result.exit_code != 0
    assert "run-cli" in result.output and "no run" in result.output
    with open_store(url) as store:
        assert not store.exists("run-cli")  # nothing was started in its place


def test_a_holder_from_before_a_restart_without_data_is_refused_after_a_new_holder_took_the_run(
    empty_on_restart_redis: DurableRedis,
) -> None:
    """Fences do not restart with an emptied server (``stores.base.next_fence``, and the claim
    script): the new holder's fence is above the old one's, so the old holder, alive through the
    restart and with nothing saved yet (its expected save number is the new holder's too), has
    its save, its ledger write and its renewal refused, and nothing of it is stored."""
    server = empty_on_restart_redis
    store = open_store(store_url(server.url, PREFIX, "none") + "&retry_for=20")
    zombie = store.acquire_lease("run-zombie", "worker-a", 60.0)
    server.kill()
    server.start()  # back empty: no head, no fence
    store.submit("t", "run-claimed")
    fresh = store.acquire_lease("run-zombie", "worker-b", 60.0)
    (claimed,) = store.claim_runnable("worker-c", 60.0)

    with pytest.raises(LeaseLost, match="refused"):
        RunWriter(store, "run-zombie").turn(1, fence=zombie.fence)
    with pytest.raises(LeaseLost):
        store.ledger_put(ledger_entry("run-zombie"), fence=zombie.fence)
    with pytest.raises(LeaseLost):
        store.renew_lease(zombie, 60.0)

    assert fresh.fence > zombie.fence and claimed.lease.fence > zombie.fence
    assert store.backend.records_after("run-zombie", 0) == []
    assert store.ledger_list("run-zombie") == []
    assert store.lease_of("run-zombie") == fresh
    store.close()
