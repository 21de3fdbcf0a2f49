"""Worker processes against the real server: races, frozen and killed workers, SIGTERM and
clock skew. Each test runs real child processes (``fleet_child.py``) in a schema of its own
and prints the figure it proves."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from fleet_progress import Progress
from pgtest import connect, with_options

from unbroken.state import occurrence_key
from unbroken.stores import open_store
from unbroken.stores.base import Store
from unbroken.stores.postgres import PostgresStore

CHILD = Path(__file__).with_name("fleet_child.py")
SCHEDULING_SLACK = 0.5
"""Seconds allowed on top of a bound for process scheduling on a busy 2-core machine."""
STALL = 90.0
"""Seconds without a single new save (all runs together) after which a fleet is stuck; while
saves keep coming, a loaded machine may take as long as it needs."""


@dataclass
class Fleet:
    """Worker processes sharing one schema, and what their logs say."""

    url: str
    logs: Path
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def start(self, name: str, *options: str) -> subprocess.Popen[bytes]:
        log = self.logs / f"{name}.jsonl"
        with open(self.logs / f"{name}.err", "wb") as errors:  # the child keeps its own copy
            proc = subprocess.Popen(
                [sys.executable, str(CHILD), "--url", self.url, "--log", str(log), *options],
                stdout=subprocess.DEVNULL,
                stderr=errors,
            )
        self.procs.append(proc)
        return proc

    def events(self, name: str | None = None) -> list[list[Any]]:
        files = [self.logs / f"{name}.jsonl"] if name else sorted(self.logs.glob("*.jsonl"))
        return [json.loads(line) for path in files if path.exists() for line in path.read_text().splitlines()]

    def wait_for(self, name: str, kind: str, timeout: float = 20.0) -> list[Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = [event for event in self.events(name) if event[0] == kind]
            if found:
                return found[0]
            time.sleep(0.02)
        errors = "".join(p.read_text() for p in self.logs.glob("*.err"))
        raise AssertionError(f"{name} never logged {kind!r} within {timeout}s; stderr:\n{errors}")

    def finish(self, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        for proc in self.procs:
            proc.wait(timeout=max(deadline - time.monotonic(), 1))
        errors = "".join(p.read_text() for p in self.logs.glob("*.err"))
        assert all(proc.returncode == 0 for proc in self.procs if proc.returncode != -signal.SIGKILL), errors

    def kill_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


@pytest.fixture
def fleet(pg_url: str, tmp_path: Path) -> Iterator[Fleet]:
    running = Fleet(with_options(pg_url, pool_size="2"), tmp_path)
    yield running
    running.kill_all()


def owners_per_token(events: list[list[Any]]) -> dict[tuple[str, int], set[str]]:
    owners: dict[tuple[str, int], set[str]] = defaultdict(set)
    for event in events:
        if event[0] == "lease":
            owners[(event[1], event[2])].add(event[3])
    return owners


def run_race(fleet: Fleet, store: Store, workers: int, runs: int) -> None:
    run_ids = [store.submit(f"deliver parcel {i}", f"race-{i:04d}") for i in range(runs)]
    started = time.perf_counter()
    for i in range(workers):
        fleet.start(f"w{i:02d}", "--until-idle", "--poll", "0.05")
    fleet.finish(timeout=300)
    elapsed = time.perf_counter() - started
    events = fleet.events()
    shared_tokens = [key for key, owners in owners_per_token(events).items() if len(owners) > 1]
    executions = Counter(event[1] for event in events if event[0] == "exec")
    completions = Counter(event[1] for event in events if event[0] == "done" and event[2] == "completed")
    keys = {occurrence_key(run_id, 2, 0, "c0"): run_id for run_id in run_ids}  # the call save 2 records
    print(
        f"\nrace: {workers} worker processes, {runs} runs in {elapsed:.1f}s ({runs / elapsed:.0f} runs/s); "
        f"runs with two owners under one token: {len(shared_tokens)}; "
        f"tool executions: {sum(executions.values())}; completions: {sum(completions.values())}"
    )
    assert shared_tokens == []
    assert executions == Counter(dict.fromkeys(keys, 1))
    assert completions == Counter(dict.fromkeys(run_ids, 1))
    assert {summary.run_id: summary.phase for summary in store.list_runs()} == dict.fromkeys(run_ids, "completed")
    assert all([r.seq for r in store.read_records(run_id)] == [1, 2, 3, 4] for run_id in run_ids)


def test_8_workers_racing_over_200_runs_complete_each_exactly_once(fleet: Fleet, pg_store: PostgresStore) -> None:
    run_race(fleet, pg_store, workers=8, runs=200)


@pytest.mark.slow  # the same race at fleet scale (~75 s on a loaded 2-core machine): make reliability
def test_16_workers_racing_over_1000_runs_complete_each_exactly_once(fleet: Fleet, pg_store: PostgresStore) -> None:
    run_race(fleet, pg_store, workers=16, runs=1000)


def test_8_worker_processes_on_one_sqlite_file_complete_each_run_exactly_once(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}?durability=normal"
    logs = tmp_path / "logs"
    logs.mkdir()
    sqlite_fleet = Fleet(url, logs)
    try:
        with open_store(url) as store:
            run_race(sqlite_fleet, store, workers=8, runs=200)
    finally:
        sqlite_fleet.kill_all()


@pytest.mark.slow
@pytest.mark.timeout(3600)  # the progress judge decides; this only bounds a fleet advancing forever
def test_runs_complete_exactly_once_while_workers_are_killed_at_random(fleet: Fleet, pg_store: PostgresStore) -> None:
    rng = random.Random(5)
    run_ids = [pg_store.submit(f"deliver parcels {i}", f"chaos-{i:04d}") for i in range(1000)]
    options = ("--ttl", "1", "--poll", "0.05", "--turns", "3")
    live = {f"w{i:02d}": fleet.start(f"w{i:02d}", *options) for i in range(8)}
    kills = 0
    progress = Progress(stall=STALL)
    while True:
        summaries = pg_store.list_runs()
        if sum(1 for s in summaries if s.phase == "completed") == len(run_ids):
            break
        progress.check(sum(s.save_seq for s in summaries))  # saves only grow while runs advance
        time.sleep(rng.uniform(0.1, 0.5))
        # Only a worker that has started (logged "ready": imported, store open) is killed: on a
        # loaded machine a replacement may take seconds to start, and killing it before then
        # starves the fleet.
        working = sorted(name for name in live if fleet.events(name))
        if not working:
            continue
        name = rng.choice(working)
        live.pop(name).kill()
        kills += 1
        replacement = f"{name.split('-')[0]}-{kills}"  # w03-17: the slot and the kill (never longer)
        live[replacement] = fleet.start(replacement, *options)
    fleet.kill_all()
    events = fleet.events()
    executions = Counter(event[1] for event in events if event[0] == "exec")
    completed_saves = sum(1 for run_id in run_ids for info in pg_store.history(run_id) if info.label == "completed")
    print(
        f"\nchaos: 1000 runs x 3 tool calls, {kills} SIGKILLs in {time.monotonic() - progress.started:.0f}s: "
        f"{completed_saves} runs completed, "
        f"max executions of one call: {max(executions.values())}, "
        f"calls never repeated: {sum(executions.values())} executions of {len(executions)} calls"
    )
    assert completed_saves == len(run_ids)
    assert max(executions.values()) == 1
    assert all(len(owners) == 1 for owners in owners_per_token(events).values())


def snapshot(store: PostgresStore, run_id: str) -> tuple[Any, ...]:
    lease = store.lease_of(run_id)
    return (
        store.read_records(run_id),
        store.ledger_list(run_id),
        [s for s in store.list_runs() if s.run_id == run_id],
        (lease.owner, lease.fence) if lease else None,
    )


def test_a_worker_frozen_past_its_lease_gets_none_of_its_writes_accepted(fleet: Fleet, pg_store: PostgresStore) -> None:
    pg_store.submit("deliver parcel", "frozen")
    # Under another host's name: a frozen worker of this host is never taken over (its run
    # waits for it: the contract's claim tests), so the fence is what stops one from elsewhere.
    stale = fleet.start("stale", "--until-idle", "--ttl", "1", "--tool-sleep", "3", "--elsewhere")
    fleet.wait_for("stale", "tool_started")
    os.kill(stale.pid, signal.SIGSTOP)
    frozen_at = time.time()
    while pg_store.lease_of("frozen") is not None:  # expiry judged on the database clock
        time.sleep(0.05)
    fleet.start("fresh", "--until-idle", "--ttl", "1").wait(timeout=30)
    assert pg_store.load("frozen").phase == "completed"
    before = snapshot(pg_store, "frozen")
    os.kill(stale.pid, signal.SIGCONT)
    stale.wait(timeout=30)
    after = snapshot(pg_store, "frozen")
    late_writes = [e for e in fleet.events("stale") if e[0] == "write" and e[-1] > frozen_at]
    accepted = [e for e in late_writes if e[4] == "ok"]
    print(
        f"\nSIGSTOP past the lease, then SIGCONT: {len(late_writes)} writes attempted by the stale worker, "
        f"{len(accepted)} accepted"
    )
    assert late_writes and accepted == []
    assert after == before
    stats = next(e[1] for e in fleet.events("stale") if e[0] == "stats")
    assert stats["lost"] == 1


def test_a_killed_workers_run_is_resumed_within_lease_ttl_plus_poll_interval(
    fleet: Fleet, pg_store: PostgresStore
) -> None:
    ttl, poll = 1.0, 0.2
    pg_store.submit("deliver parcel", "killed")
    victim = fleet.start("victim", "--ttl", str(ttl), "--poll", str(poll), "--tool-sleep", "30")
    fleet.wait_for("victim", "tool_started")
    rescuer = fleet.start("rescuer", "--ttl", str(ttl), "--poll", str(poll))
    fleet.wait_for("rescuer", "ready")
    killed_at = time.time()
    victim.kill()
    victim.wait()
    claimed = fleet.wait_for("rescuer", "lease")
    fleet.wait_for("rescuer", "done")
    rescuer.send_signal(signal.SIGTERM)
    rescuer.wait(timeout=30)
    delay = claimed[-1] - killed_at
    print(f"\nSIGKILL mid-run -> resumed by another worker after {delay:.2f}s (lease TTL {ttl}s + poll {poll}s)")
    assert delay <= ttl + poll + SCHEDULING_SLACK
    state = pg_store.load("killed")
    assert state.phase == "completed"
    assert [r.seq for r in pg_store.read_records("killed")] == list(range(1, state.save_seq + 1))


def test_sigterm_finishes_the_current_save_point_releases_the_lease_and_exits(
    fleet: Fleet, pg_store: PostgresStore
) -> None:
    pg_store.submit("deliver parcel", "stopped")
    worker = fleet.start("worker", "--ttl", "30", "--tool-sleep", "1")
    fleet.wait_for("worker", "tool_started")
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(timeout=20) == 0
    history = pg_store.history("stopped")
    print(f"\nSIGTERM during a tool: stopped after save point {history[-1].seq} ({history[-1].label})")
    assert history[-1].label == "tools_done"
    assert pg_store.lease_of("stopped") is None  # released, not left to expire (TTL is 30s)
    assert [e.status for e in pg_store.ledger_list("stopped")] == ["succeeded"]
    fleet.start("next", "--until-idle").wait(timeout=30)
    assert pg_store.load("stopped").phase == "completed"
    assert sum(1 for e in fleet.events() if e[0] == "exec") == 1


def test_ten_minutes_of_clock_skew_on_workers_changes_nothing(fleet: Fleet, pg_store: PostgresStore) -> None:
    run_ids = [pg_store.submit("deliver parcel", f"skew-{i}") for i in range(6)]
    with connect() as conn:
        row = conn.execute("SELECT extract(epoch FROM clock_timestamp())::float8").fetchone()
        assert row is not None
        (db_start,) = row
    common = ("--until-idle", "--ttl", "1", "--poll", "0.05", "--tool-sleep", "1.5", "--concurrency", "2")
    fleet.start("ahead", "--skew", "600", *common)
    fleet.start("behind", "--skew", "-600", *common)
    fleet.finish(timeout=60)
    events = fleet.events()
    leases = [e for e in events if e[0] == "lease"]
    refused = [e for e in events if e[0] == "write" and e[4] == "refused"]
    offsets = [lease[4] - db_start for lease in leases]
    print(
        f"\nclock skew +-600s: {len(leases)} leases, expiry - database start time in "
        f"[{min(offsets):.1f}, {max(offsets):.1f}]s, {len(refused)} refused writes, "
        f"{sum(1 for e in events if e[0] == 'exec')} executions for {len(run_ids)} runs"
    )
    assert all(0 < offset < 30 for offset in offsets)  # ttl is 1s; a skewed clock would be off by 600s
    assert refused == []  # nobody's lease was taken over: heartbeats kept every lease alive
    assert Counter(e[1] for e in events if e[0] == "exec") == Counter(
        {occurrence_key(run_id, 2, 0, "c0"): 1 for run_id in run_ids}
    )
    assert all(owners == 1 for owners in map(len, owners_per_token(events).values()))
