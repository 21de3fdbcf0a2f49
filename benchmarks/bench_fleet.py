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
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/test"
TTL, POLL = 1.0, 0.1


@dataclass
class FleetFigures:
    """Save points per second of ``runs`` runs saving at once, and of the bare loop, per round.

    Two ways to host the runs: ``workers`` (the goal's shape, what a fleet runs: a worker process
    per core, each saving its share of the runs from as many threads, as ``unbroken worker`` and
    ``arun`` do) and ``saves`` (one process and one connection per run, kept for information)."""

    runs: int
    turns: int
    saves: list[float] = field(default_factory=list)
    bare: list[float] = field(default_factory=list)
    workers: list[float] = field(default_factory=list)
    workers_off: list[float] = field(default_factory=list)
    """``workers`` with the store's group commit off (``--group-commit-off``: before/after)."""
    cpu: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    """Per shape ("workers", "saves", "bare"), each round's CPU per save in microseconds: (the
    client processes', their server backends')."""
    processes: int = 2
    """Worker processes of the ``workers`` shape (one per core)."""

    @property
    def ratio(self) -> float:
        """The goal's ratio: the median of the rounds' ``workers`` / ``bare`` (each round's
        figures were taken back to back)."""
        return statistics.median(w / b for w, b in zip(self.workers, self.bare, strict=True))

    @property
    def per_run_ratio(self) -> float:
        """The same for one process per run (``saves``)."""
        return statistics.median(s / b for s, b in zip(self.saves, self.bare, strict=True))


def _rate(reports: list[dict[str, Any]]) -> float:
    return sum(r["saves"] for r in reports) / (max(r["end"] for r in reports) - min(r["start"] for r in reports))


def _cpu(reports: list[dict[str, Any]]) -> tuple[float, float]:
    """CPU per save in microseconds: (the client processes', their server backends')."""
    saves = sum(r["saves"] for r in reports)
    return 1e6 * sum(r["cpu_client"] for r in reports) / saves, 1e6 * sum(r["cpu_server"] for r in reports) / saves


def backend_cpu(pids: list[int]) -> float:
    """CPU seconds (user + system) the server's backend processes ``pids`` have used (the server
    runs on this machine)."""
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def backends_named(server: str, application_name: str) -> list[int]:
    import psycopg

    with psycopg.connect(server, autocommit=True) as conn:
        rows = conn.execute("SELECT pid FROM pg_stat_activity WHERE application_name = %s", (application_name,))
        return [row[0] for row in rows]


def named(url: str, application_name: str) -> str:
    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query))
    query["application_name"] = application_name
    return urlunsplit(parts._replace(query=urlencode(query, quote_via=quote)))


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
        self.last_cpu = (0.0, 0.0)

    def connect(self) -> Any:
        return self.psycopg.connect(self.server, autocommit=True, options=f"-c search_path={self.schema}")

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

    def concurrent_saves(self, runs: int, turns: int, tag: str = "") -> float:
        """Save points per second when ``runs`` runs save at once, each in its own process (one
        server): every process appends the workload's turns (2.4 KB each, two saves a turn) to
        its own run through the store's ``append``, started together."""
        prefix = f"saves-{runs}{tag}"
        reports = self._race(runs, lambda index, go: ["--saver", self.url, f"{prefix}-{index}", str(turns), go])
        self.last_cpu = _cpu(reports)
        return _rate(reports)

    def worker_saves(self, runs: int, turns: int, processes: int, tag: str = "", *, group_commit: bool = True) -> float:
        """Save points per second when ``runs`` runs save at once hosted as a fleet hosts them:
        ``processes`` worker processes (one per core), each saving its share of the runs from
        as many threads (one store per process, so its saves may share commits), started together.
        The same workload and ``append`` as ``concurrent_saves``."""
        prefix = f"wsaves-{runs}{tag}{'' if group_commit else '-off'}"
        url = self.url if group_commit else f"{self.url}&group_commit=off"
        shares = [len(range(i, runs, processes)) for i in range(processes)]
        firsts = [sum(shares[:i]) for i in range(processes)]

        def argv(index: int, go: str) -> list[str]:
            return ["--worker-saver", url, prefix, str(firsts[index]), str(shares[index]), str(turns), go]

        reports = self._race(processes, argv)
        self.last_cpu = _cpu(reports)
        return _rate(reports)

    def bare_rows(self, runs: int, tag: str = "") -> list[Path]:
        """The record rows (seq, label, snapshot, body, checksum) of the runs that
        ``concurrent_saves(runs, ..., tag)`` wrote, one file per run: the bare loop's input."""
        files = []
        with self.connect() as conn:
            for index in range(runs):
                rows = conn.execute(
                    "SELECT seq, label, snapshot, body, checksum FROM unbroken_records WHERE run_id = %s ORDER BY seq",
                    (f"saves-{runs}{tag}-{index}",),
                ).fetchall()
                path = self.tmp / f"bare-rows-{runs}{tag}-{index}.json"
                path.write_text(json.dumps(rows))
                files.append(path)
        return files

    def bare_inserts(self, files: list[Path], tag: str = "") -> float:
        """The floor of ``concurrent_saves``: the same record bytes (``bare_rows``) as autocommit
        INSERTs, one process and one connection per run, into a table of the records table's shape
        (same columns, same primary key). Only psycopg runs in these processes (no unbroken code);
        INSERTs per second."""
        runs = len(files)
        table = f"bare_{runs}"
        with self.connect() as conn:
            conn.execute(
                f"CREATE TABLE IF NOT EXISTS {table} (run_id text NOT NULL, seq bigint NOT NULL, label text NOT NULL, "
                "snapshot boolean NOT NULL, body text NOT NULL, checksum text NOT NULL, PRIMARY KEY (run_id, seq))"
            )
        reports = self._race(
            runs,
            lambda index, go: ["--bare", self.server, self.schema, table, f"bare{tag}-{index}", str(files[index]), go],
        )
        self.last_cpu = _cpu(reports)
        return _rate(reports)

    def fleet(
        self, runs: int, turns: int, rounds: int, processes: int | None = None, *, group_commit_off: bool = False
    ) -> FleetFigures:
        """``worker_saves`` (the goal's shape), ``concurrent_saves`` (one process per run, for
        information) and their bare floor, ``rounds`` times, the order reversed every other
        round: the machine is shared and noisy, so each round's figures are taken back to back
        and the verdict is the median of the rounds' ratios."""
        figures = FleetFigures(runs, turns, processes=processes or os.cpu_count() or 2)
        files: list[Path] | None = None
        for index in range(rounds):
            tag = f"-r{index}"
            if group_commit_off:
                off = self.worker_saves(runs, turns, figures.processes, tag, group_commit=False)
                self._taken(figures, "workers_off", off)
            if files is not None and index % 2 == 1:
                self._taken(figures, "bare", self.bare_inserts(files, tag))
                self._taken(figures, "saves", self.concurrent_saves(runs, turns, tag))
                self._taken(figures, "workers", self.worker_saves(runs, turns, figures.processes, tag))
                continue
            self._taken(figures, "workers", self.worker_saves(runs, turns, figures.processes, tag))
            self._taken(figures, "saves", self.concurrent_saves(runs, turns, tag))
            files = files or self.bare_rows(runs, tag)  # the bytes of the first round's runs
            self._taken(figures, "bare", self.bare_inserts(files, tag))
        return figures

    def _taken(self, figures: FleetFigures, shape: str, rate: float) -> None:
        getattr(figures, shape).append(rate)
        figures.cpu.setdefault(shape, []).append(self.last_cpu)

    def _race(self, runs: int, argv: Callable[[int, str], list[str]]) -> list[dict[str, Any]]:
        """Start ``runs`` processes (``argv(index, go_file)``), wait until each says ready, start
        them together; returns each one's report (start, end, saves)."""
        go = self.tmp / f"go-{uuid.uuid4().hex[:8]}"
        procs = []
        for index in range(runs):
            args = [sys.executable, __file__, *argv(index, str(go))]
            procs.append(subprocess.Popen(args, stdout=subprocess.PIPE, text=True))
        try:
            for proc in procs:  # each prints "ready" once connected and its run deleted
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
            return reports
        finally:
            for proc in procs:  # none left behind when one failed
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()

    def close(self) -> None:
        self.store.close()
        with self.psycopg.connect(self.server, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{self.schema}" CASCADE')


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=400, help="runs per worker count")
    parser.add_argument("--turns", type=int, default=5, help="tool calls per run")
    parser.add_argument("--deaths", type=int, default=7, help="worker deaths to time")
    parser.add_argument(
        "--saving-at-once",
        default="",
        help="only make bench's rows of issue 24 goal 1: runs saving at once, e.g. 8,32 (with --rounds)",
    )
    parser.add_argument("--rounds", type=int, default=5, help="rounds of --saving-at-once")
    parser.add_argument(
        "--group-commit-off", action="store_true", help="with --saving-at-once: the workers also with group_commit=off"
    )
    args = parser.parse_args()
    server = os.environ.get("UNBROKEN_TEST_POSTGRES_URL") or DEFAULT_URL
    bench = Bench(server)
    try:
        if args.saving_at_once:
            for runs in (int(n) for n in args.saving_at_once.split(",")):
                fleet = bench.fleet(runs, max(20, 800 // runs), args.rounds, group_commit_off=args.group_commit_off)
                print(describe(fleet))
            return
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


def describe(fleet: FleetFigures) -> str:
    """Both shapes against the bare loop, each round's ratios (``make bench`` prints the same)."""

    def ratios(rates: list[float]) -> str:
        return ", ".join(f"{r / b:.2f}" for r, b in zip(rates, fleet.bare, strict=True))

    def ratio(rates: list[float]) -> float:
        return statistics.median(r / b for r, b in zip(rates, fleet.bare, strict=True))

    per = fleet.runs // fleet.processes

    def cpu(shape: str) -> str:
        rounds = fleet.cpu.get(shape)
        if not rounds:
            return ""
        client = statistics.median(c for c, _ in rounds)
        server = statistics.median(s for _, s in rounds)
        return f"; CPU a save: client {client:.0f} us, server {server:.0f} us"

    return (
        f"PostgreSQL, {fleet.runs} runs saving at once ({2 * fleet.turns + 1} saves each), against the same record "
        f"bytes as bare autocommit INSERTs from {fleet.runs} connections: {statistics.median(fleet.bare):,.0f}/s"
        f"{cpu('bare')}\n"
        f"  in {fleet.processes} worker processes ({per} runs each, as threads): "
        f"{statistics.median(fleet.workers):,.0f} save points/s = {fleet.ratio:.2f}x (rounds {ratios(fleet.workers)})"
        f"{cpu('workers')}\n"
        f"  one process and connection per run: {statistics.median(fleet.saves):,.0f} save points/s = "
        f"{fleet.per_run_ratio:.2f}x (rounds {ratios(fleet.saves)}){cpu('saves')}"
        + (
            f"\n  in {fleet.processes} worker processes, group_commit=off: {statistics.median(fleet.workers_off):,.0f} "
            f"save points/s = {ratio(fleet.workers_off):.2f}x"
            f" (rounds {ratios(fleet.workers_off)}){cpu('workers_off')}"
            if fleet.workers_off
            else ""
        )
    )


def saver(url: str, run_id: str, turns: int, go: str) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import writer
    from unbroken.stores import open_store

    name = f"ubs{os.getpid()}"
    store = open_store(named(url, name))
    store.delete_run(run_id)
    print("ready", flush=True)
    while not os.path.exists(go):
        time.sleep(0.001)
    start, cpu = time.time(), time.process_time()
    saves = writer.write_turns(store, run_id, turns)
    end, cpu = time.time(), time.process_time() - cpu
    server = backend_cpu(backends_named(url.split("?")[0], name))
    store.close()
    print(json.dumps({"start": start, "end": end, "saves": saves, "cpu_client": cpu, "cpu_server": server}), flush=True)


def worker_saver(url: str, prefix: str, first: int, count: int, turns: int, go: str) -> None:
    """A worker process of ``worker_saves``: ``count`` runs saving at once from as many threads."""
    import threading

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import writer
    from unbroken.stores import open_store

    name = f"ubw{os.getpid()}"
    store = open_store(named(url, name))
    run_ids = [f"{prefix}-{first + i}" for i in range(count)]
    for run_id in run_ids:
        store.delete_run(run_id)
    saves = [0] * count
    failed: list[BaseException] = []

    def run(index: int) -> None:
        try:
            saves[index] = writer.write_turns(store, run_ids[index], turns)
        except BaseException as exc:
            failed.append(exc)
            raise

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    print("ready", flush=True)
    while not os.path.exists(go):
        time.sleep(0.001)
    start, cpu = time.time(), time.process_time()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    end, cpu = time.time(), time.process_time() - cpu
    server = backend_cpu(backends_named(url.split("?")[0], name))
    store.close()
    if failed:
        raise SystemExit(f"{len(failed)} of {count} runs failed: {failed[0]!r}")
    report = {"start": start, "end": end, "saves": sum(saves), "cpu_client": cpu, "cpu_server": server}
    print(json.dumps(report), flush=True)


def bare(server: str, schema: str, table: str, run_id: str, rows_file: str, go: str) -> None:
    """The floor's process: psycopg only, one connection, autocommit INSERTs of given rows."""
    import psycopg

    rows = json.loads(Path(rows_file).read_text())
    with psycopg.connect(server, autocommit=True, options=f"-c search_path={schema}") as conn:
        insert = f"INSERT INTO {table} (run_id, seq, label, snapshot, body, checksum) VALUES (%s, %s, %s, %s, %s, %s)"
        print("ready", flush=True)
        while not os.path.exists(go):
            time.sleep(0.001)
        backend = [conn.info.backend_pid]
        start, cpu, server = time.time(), time.process_time(), backend_cpu(backend)
        for seq, label, snapshot, body, checksum in rows:
            conn.execute(insert, (run_id, seq, label, snapshot, body, checksum))
        end, cpu, server = time.time(), time.process_time() - cpu, backend_cpu(backend) - server
    report = {"start": start, "end": end, "saves": len(rows), "cpu_client": cpu, "cpu_server": server}
    print(json.dumps(report), flush=True)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--saver":
        saver(sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5])
    elif len(sys.argv) > 1 and sys.argv[1] == "--worker-saver":
        _, _, url, prefix, first, count, turns, go = sys.argv
        worker_saver(url, prefix, int(first), int(count), int(turns), go)
    elif len(sys.argv) > 1 and sys.argv[1] == "--bare":
        bare(*sys.argv[2:8])
    elif len(sys.argv) > 1 and sys.argv[1] == "--child":
        _, _, url, log, turns, sleep, idle = sys.argv
        child(url, log, int(turns), float(sleep), idle == "1")
    else:
        main()
