"""Workers on one machine against PostgreSQL: throughput and take-over time.

    python benchmarks/bench_fleet.py [--runs 400] [--turns 5] [--deaths 7]

Prints save points per second and runs per second with 1, 2, 4 and 8 worker processes (each
run: a scripted agent with ``--turns`` side-effecting tool calls, so 2 * turns + 2 save
points), and the median time from a worker's SIGKILL to another worker claiming its run
(lease TTL 1 s, poll interval 0.1 s). The server comes from ``UNBROKEN_TEST_POSTGRES_URL``
(default ``postgresql://postgres@127.0.0.1:5432/test``); everything happens in a throwaway
schema that is dropped at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/test"
TTL, POLL = 1.0, 0.1


def with_schema(url: str, schema: str) -> str:
    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query))
    query.update(schema=schema, pool_size="2")
    return urlunsplit(parts._replace(query=urlencode(query, quote_via=quote)))


# --------------------------------------------------------------------------- worker process


def child(url: str, log: str, turns: int, tool_sleep: float, until_idle: bool) -> None:
    from unbroken import Agent, ScriptedModel, tool
    from unbroken.stores import open_store
    from unbroken.stores.base import Store
    from unbroken.worker import Worker

    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def note(*parts: Any) -> None:
        os.write(fd, (json.dumps([*parts, time.time()]) + "\n").encode())

    @tool(effect="side_effect")
    def deliver(item: str) -> str:
        """Deliver an item."""
        if tool_sleep:
            note("tool_started")
            time.sleep(tool_sleep)
        return f"delivered {item}"

    script: list[dict[str, Any]] = [
        {
            "content": [{"type": "tool_use", "id": f"c{i}", "name": "deliver", "input": {"item": f"p{i}"}}],
            "usage": {"input_tokens": 100, "output_tokens": 20},
        }
        for i in range(turns)
    ]
    script.append({"content": [{"type": "text", "text": "done"}], "stop_reason": "end_turn", "usage": {}})
    store = open_store(url)
    claim = store.claim_runnable

    def claim_runnable(owner: str, ttl: float, **kw: Any) -> Any:
        claimed = claim(owner, ttl, **kw)
        for run in claimed:
            note("claimed", run.run_id)
        return claimed

    store.claim_runnable = claim_runnable  # type: ignore[method-assign]

    def build(worker_store: Store) -> Agent:
        return Agent(ScriptedModel(script), [deliver], worker_store, lease_ttl=TTL)

    note("ready")
    Worker(build, store, poll_interval=POLL).run(until_idle=until_idle)
    store.close()


# --------------------------------------------------------------------------- driver


class Bench:
    def __init__(self, server: str) -> None:
        import psycopg

        self.psycopg = psycopg
        self.server = server
        self.schema = f"bench_{uuid.uuid4().hex[:10]}"
        self.url = with_schema(server, self.schema)
        self.tmp = Path(tempfile.mkdtemp(prefix="bench_fleet_"))
        from unbroken.stores.postgres import PostgresStore

        self.store = PostgresStore(self.url)

    def spawn(self, name: str, turns: int, tool_sleep: float = 0.0, until_idle: bool = False) -> Any:
        args = [sys.executable, __file__, "--child", self.url, str(self.tmp / f"{name}.jsonl"), str(turns)]
        args += [str(tool_sleep), "1" if until_idle else "0"]
        return subprocess.Popen(args)

    def events(self, name: str) -> list[list[Any]]:
        path = self.tmp / f"{name}.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []

    def wait_event(self, name: str, kind: str, timeout: float = 30) -> list[Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for event in self.events(name):
                if event[0] == kind:
                    return event
            time.sleep(0.01)
        raise RuntimeError(f"{name} never logged {kind}")

    def throughput(self, workers: int, runs: int, turns: int) -> tuple[float, float]:
        prefix = f"t{workers}-"
        for i in range(runs):
            self.store.submit("deliver the parcels", f"{prefix}{i:05d}")
        procs = [self.spawn(f"{prefix}w{i}", turns, until_idle=True) for i in range(workers)]
        for i in range(workers):
            self.wait_event(f"{prefix}w{i}", "ready")
        started = time.perf_counter()  # from the moment every worker is up (startup excluded)
        for proc in procs:
            proc.wait()
        elapsed = time.perf_counter() - started
        saves = sum(s.save_seq for s in self.store.list_runs() if s.run_id.startswith(prefix))
        done = sum(1 for s in self.store.list_runs() if s.run_id.startswith(prefix) and s.phase == "completed")
        if done != runs:
            raise RuntimeError(f"only {done} of {runs} runs completed")
        return saves / elapsed, runs / elapsed

    def takeover(self, index: int) -> float:
        run_id = f"death-{index}"
        self.store.submit("deliver the parcels", run_id)
        victim = self.spawn(f"victim{index}", 1, tool_sleep=60)
        self.wait_event(f"victim{index}", "tool_started")
        rescuer = self.spawn(f"rescuer{index}", 1)
        self.wait_event(f"rescuer{index}", "ready")
        killed_at = time.time()
        victim.send_signal(signal.SIGKILL)
        victim.wait()
        claimed = self.wait_event(f"rescuer{index}", "claimed")
        rescuer.send_signal(signal.SIGTERM)
        rescuer.wait()
        return float(claimed[-1]) - killed_at

    def concurrent_saves(self, runs: int, turns: int) -> float:
        """Save points per second when ``runs`` runs save at once, each in its own process (one
        server): every process appends the workload's turns (2.4 KB each, two saves a turn) to
        its own run through the store's ``append``, started together."""
        go = self.tmp / f"go-{runs}"
        procs = []
        for index in range(runs):
            args = [sys.executable, __file__, "--saver", self.url, f"saves-{runs}-{index}", str(turns), str(go)]
            procs.append(subprocess.Popen(args, stdout=subprocess.PIPE, text=True))
        for proc in procs:  # each prints "ready" once its store is open and its run deleted
            assert proc.stdout is not None
            if proc.stdout.readline().strip() != "ready":
                raise RuntimeError("a saver process failed to start")
        go.touch()
        reports = []
        for proc in procs:
            out, _ = proc.communicate()
            if proc.returncode != 0:
                raise RuntimeError("a saver process failed")
            reports.append(json.loads(out.strip().splitlines()[-1]))
        saves = sum(report["saves"] for report in reports)
        return saves / (max(r["end"] for r in reports) - min(r["start"] for r in reports))

    def close(self) -> None:
        self.store.close()
        with self.psycopg.connect(self.server, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{self.schema}" CASCADE')


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=400, help="runs per worker count")
    parser.add_argument("--turns", type=int, default=5, help="tool calls per run")
    parser.add_argument("--deaths", type=int, default=7, help="worker deaths to time")
    args = parser.parse_args()
    server = os.environ.get("UNBROKEN_TEST_POSTGRES_URL") or DEFAULT_URL
    bench = Bench(server)
    try:
        print(f"PostgreSQL {urlsplit(server).hostname}, {args.runs} runs x {args.turns} tool calls per row")
        print(f"{'workers':>8} {'save points/s':>14} {'runs/s':>8}")
        for workers in (1, 2, 4, 8):
            saves, runs = bench.throughput(workers, args.runs, args.turns)
            print(f"{workers:>8} {saves:>14.0f} {runs:>8.1f}")
        delays = [bench.takeover(i) for i in range(args.deaths)]
        print(
            f"worker SIGKILL -> run claimed by another worker: median {statistics.median(delays):.2f}s "
            f"(min {min(delays):.2f}, max {max(delays):.2f}; lease TTL {TTL:g}s, poll {POLL:g}s, n={len(delays)})"
        )
    finally:
        bench.close()


def saver(url: str, run_id: str, turns: int, go: str) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import writer
    from unbroken.stores import open_store

    store = open_store(url)
    store.delete_run(run_id)
    print("ready", flush=True)
    while not os.path.exists(go):
        time.sleep(0.001)
    start = time.time()
    saves = writer.write_turns(store, run_id, turns)
    end = time.time()
    store.close()
    print(json.dumps({"start": start, "end": end, "saves": saves}), flush=True)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--saver":
        saver(sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5])
    elif len(sys.argv) > 1 and sys.argv[1] == "--child":
        _, _, url, log, turns, sleep, idle = sys.argv
        child(url, log, int(turns), float(sleep), idle == "1")
    else:
        main()
