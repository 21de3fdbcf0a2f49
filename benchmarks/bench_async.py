"""Many ``Agent.arun`` runs in one process on PostgreSQL: event-loop lag and save rate (issue 24 goal 2).

    python benchmarks/bench_async.py [--runs 200] [--procs 4] [--slow-runs 50] [--turns 5]

Three figures, each from the same scripted runs (a side-effecting tool call per turn, so every
turn makes a ledger claim and two save points; no network):

1. ``--runs`` runs at once through ``arun`` in one process, with a ticker task that sleeps 1 ms
   and records how late it wakes: the event loop's lag (p99 must stay under 5 ms) and the save
   points per second. Each late wake is also split (Linux, ``/proc/thread-self/schedstat``): the
   time the loop's thread waited in the run queue for a CPU (the machine's load: other processes,
   the server) against the rest (the loop's own work, and the GIL held by a store thread): the
   table's "without the wait for a CPU" column is the part this process causes;
2. the same runs spread over ``--procs`` processes (each running its share through ``arun``):
   save points per second, the baseline of goal 1's 0.8x;
3. with 20 ms added to every request to PostgreSQL (a delaying TCP proxy in front of it): one
   run alone, then ``--slow-runs`` at once; the many must reach 10x the one's save rate.

``--hops`` measures only the hand-off itself (``stores.offload.off_loop`` of a call that does
nothing, 1 and 50 callers at once, no store): CPU time per hand-off, the whole process's and the
event loop thread's; no server needed.

The server comes from ``UNBROKEN_TEST_POSTGRES_URL`` (default the local test server); every
figure uses a throwaway schema, dropped at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/test"
LAG_TARGET = 0.005
RATE_TARGET = 0.8
OVERLAP_TARGET = 10.0
DELAY = 0.020


def _with(url: str, **options: str) -> str:
    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query))
    query.update(options)
    return urlunsplit(parts._replace(query=urlencode(query, quote_via=quote)))


# --------------------------------------------------------------------------- the runs


def _agent(store: Any, turns: int) -> Any:
    from unbroken import Agent, ScriptedModel, tool

    @tool(effect="side_effect")
    def deliver(item: str) -> str:
        """Deliver an item."""
        return f"delivered {item}"

    script: list[dict[str, Any]] = [
        {
            "content": [{"type": "tool_use", "id": f"c{i}", "name": "deliver", "input": {"item": f"p{i}"}}],
            "stop_reason": "tool_use",
            "usage": {"input_tokens": 100, "output_tokens": 20},
        }
        for i in range(turns)
    ]
    script.append({"content": [{"type": "text", "text": "done"}], "stop_reason": "end_turn", "usage": {}})
    return Agent(ScriptedModel(script), [deliver], store)


@dataclass
class Batch:
    saves: int
    seconds: float
    lags: list[float]
    idle_lags: list[float] | None = None
    cpu_waits: list[float] | None = None
    """For each lag, the time the loop's thread spent runnable, waiting for a CPU (None: not on Linux)."""
    """The ticker's lags in the same process just before the runs started (the machine's own noise)."""

    @property
    def rate(self) -> float:
        return self.saves / self.seconds

    def lag_p99(self, idle: bool = False) -> float:
        lags = (self.idle_lags or []) if idle else self.lags
        return _p99(lags)

    def own_lag_p99(self) -> float | None:
        """The lag's p99 without the loop thread's wait for a CPU: what this process causes."""
        if not self.cpu_waits:
            return None
        return _p99([max(0.0, lag - wait) for lag, wait in zip(self.lags, self.cpu_waits, strict=True)])


def _p99(values: list[float]) -> float:
    return statistics.quantiles(values, n=100)[98] if len(values) >= 100 else max(values, default=0.0)


def _cpu_wait() -> float | None:
    """Seconds this thread has spent runnable but not running (waiting for a CPU); Linux only."""
    try:
        with open("/proc/thread-self/schedstat") as stat:
            return int(stat.read().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return None


async def _batch(url: str, runs: int, turns: int, tag: str, idle: float = 1.0) -> Batch:
    """``runs`` runs at once in this process, with the ticker measuring the loop's lag."""
    from unbroken.stores import open_store

    store = open_store(url)
    lags: list[float] = []
    waits: list[float] = []
    done = asyncio.Event()

    async def ticker() -> None:
        while not done.is_set():
            began, waited = time.perf_counter(), _cpu_wait()
            await asyncio.sleep(0.001)
            lags.append(time.perf_counter() - began - 0.001)
            now = _cpu_wait()
            if waited is not None and now is not None:
                waits.append(now - waited)

    agents = [_agent(store, turns) for _ in range(runs)]
    ticking = asyncio.create_task(ticker())
    await asyncio.sleep(idle)  # the ticker alone: the lag this machine gives an idle loop
    idle_lags, lags[:], waits[:] = list(lags), [], []
    started = time.perf_counter()
    results = await asyncio.gather(*(agent.arun("deliver", run_id=f"{tag}-{n}") for n, agent in enumerate(agents)))
    seconds = time.perf_counter() - started
    done.set()
    await ticking
    store.close()
    if any(result.status != "completed" for result in results):
        raise SystemExit(f"a run did not complete: {[r.status for r in results]}")
    cpu_waits = waits if len(waits) == len(lags) else None  # (both appended in one step of the ticker)
    return Batch(sum(result.state.save_seq for result in results), seconds, lags, idle_lags, cpu_waits)


def child(url: str, runs: int, turns: int, tag: str, start_at: float, out: str, idle: float) -> None:
    """One of the processes of figure 2: wait for the common start, run its share, report."""
    from unbroken.stores import open_store

    open_store(url).close()  # the schema is checked before the clock starts
    time.sleep(max(0.0, start_at - time.time()))
    began = time.time()
    batch = asyncio.run(_batch(url, runs, turns, tag, idle))
    began += idle  # the runs start after the ticker's idle time
    Path(out).write_text(json.dumps({"saves": batch.saves, "began": began, "ended": began + batch.seconds}))


def _spread(url: str, runs: int, procs: int, turns: int, tmp: Path, idle: float) -> Batch:
    start_at = time.time() + 3.0  # every child imported and connected by then
    children = []
    for index in range(procs):
        share = runs // procs + (1 if index < runs % procs else 0)
        out = tmp / f"child-{index}.json"
        args = [sys.executable, __file__, "--child", url, str(share), str(turns), f"p{index}", repr(start_at), str(out)]
        args.append(repr(idle))
        children.append((subprocess.Popen(args), out))
    reports = []
    for process, out in children:
        if process.wait(timeout=600) != 0:
            raise SystemExit(f"a child failed ({process.returncode})")
        reports.append(json.loads(out.read_text()))
    seconds = max(r["ended"] for r in reports) - min(r["began"] for r in reports)
    return Batch(sum(r["saves"] for r in reports), seconds, [])


# --------------------------------------------------------------------------- 20 ms per request


class DelayingProxy:
    """A TCP proxy in front of PostgreSQL that holds every chunk the client sends for ``delay``
    seconds before passing it on (each statement's round trip costs ``delay`` more)."""

    def __init__(self, target: tuple[str, int], delay: float) -> None:
        self.target, self.delay = target, delay
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def url(self, url: str) -> str:
        parts = urlsplit(url)
        user = f"{parts.username}@" if parts.username else ""
        return urlunsplit(parts._replace(netloc=f"{user}127.0.0.1:{self.port}"))

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.target)
            for sock in (client, server):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            threading.Thread(target=self._pipe, args=(client, server, self.delay), daemon=True).start()
            threading.Thread(target=self._pipe, args=(server, client, 0.0), daemon=True).start()

    @staticmethod
    def _pipe(source: socket.socket, sink: socket.socket, delay: float) -> None:
        try:
            while chunk := source.recv(65536):
                if delay:
                    time.sleep(delay)
                sink.sendall(chunk)
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self.listener.close()


# --------------------------------------------------------------------------- the figures


@dataclass
class AsyncResult:
    runs: int
    procs: int
    slow_runs: int
    one_process: Batch
    processes: Batch
    slow_one: Batch
    slow_many: Batch
    pool_size: int
    slow_pool_size: int

    def verdicts(self) -> list[str]:
        lag = self.one_process.lag_p99()
        ratio = self.one_process.rate / self.processes.rate
        overlap = self.slow_many.rate / self.slow_one.rate
        return [
            _verdict(
                lag < LAG_TARGET,
                f"arun, {self.runs} runs at once in one process on PostgreSQL: event-loop lag p99 "
                f"{lag * 1e3:.2f} ms (the idle loop just before: {self.one_process.lag_p99(idle=True) * 1e3:.2f} ms"
                f"{_own(self.one_process)}); target < {LAG_TARGET * 1e3:.0f} ms",
            ),
            _verdict(
                ratio >= RATE_TARGET,
                f"arun, {self.runs} runs in one process: {self.one_process.rate:,.0f} save points/s = {ratio:.2f}x "
                f"the same runs over {self.procs} processes ({self.processes.rate:,.0f}/s); target >= {RATE_TARGET}x",
            ),
            _verdict(
                overlap >= OVERLAP_TARGET,
                f"arun with {DELAY * 1e3:.0f} ms added to every PostgreSQL request: {self.slow_runs} runs at once "
                f"{self.slow_many.rate:,.0f} save points/s = {overlap:.1f}x one run alone "
                f"({self.slow_one.rate:,.1f}/s); target >= {OVERLAP_TARGET:.0f}x",
            ),
        ]

    def table(self) -> str:
        rows = [
            ("one process, arun", self.runs, self.one_process, self.pool_size),
            (f"{self.procs} processes, arun each", self.runs, self.processes, self.pool_size),
            (f"+{DELAY * 1e3:.0f} ms a request, one run", 1, self.slow_one, self.slow_pool_size),
            (f"+{DELAY * 1e3:.0f} ms a request, at once", self.slow_runs, self.slow_many, self.slow_pool_size),
        ]
        out = [
            "| how | runs | pool_size | save points | seconds | save points/s | loop lag p50 / p99 / max ms "
            "| lag p99 without the wait for a CPU |"
        ]
        out.append("|---|---:|---:|---:|---:|---:|---|---:|")
        for how, runs, batch, pool in rows:
            lag, own = "-", "-"
            if batch.lags:
                p50, p99, most = statistics.median(batch.lags), batch.lag_p99(), max(batch.lags)
                lag = f"{p50 * 1e3:.2f} / {p99 * 1e3:.2f} / {most * 1e3:.2f}"
                mine = batch.own_lag_p99()
                own = "-" if mine is None else f"{mine * 1e3:.2f} ms"
            figures = f"{batch.saves:,} | {batch.seconds:.2f} | {batch.rate:,.0f}"
            out.append(f"| {how} | {runs} | {pool} | {figures} | {lag} | {own} |")
        return "\n".join(out)


def _own(batch: Batch) -> str:
    mine = batch.own_lag_p99()
    return "" if mine is None else f"; without the loop thread's wait for a CPU: {mine * 1e3:.2f} ms"


def _verdict(ok: bool, text: str) -> str:
    return f"{'PASS' if ok else 'FAIL'} {text}"


def measure(server: str, runs: int = 200, procs: int = 4, slow_runs: int = 50, turns: int = 5,
            pool_size: int = 4, slow_pool_size: int = 16, idle: float = 1.0) -> AsyncResult:  # fmt: skip
    import tempfile

    import psycopg

    schema = f"bench_async_{uuid.uuid4().hex[:10]}"
    url = _with(server, schema=schema, pool_size=str(pool_size))
    tmp = Path(tempfile.mkdtemp(prefix="bench_async_"))
    target = urlsplit(server)
    proxy = DelayingProxy((target.hostname or "127.0.0.1", target.port or 5432), DELAY)
    try:
        one = asyncio.run(_batch(url, runs, turns, "one", idle))
        spread = _spread(url, runs, procs, turns, tmp, idle)
        slow_url = _with(proxy.url(server), schema=schema, pool_size=str(slow_pool_size))
        slow_one = asyncio.run(_batch(slow_url, 1, turns, "slow-one", idle))
        slow_many = asyncio.run(_batch(slow_url, slow_runs, turns, "slow-many", idle))
    finally:
        proxy.close()
        with psycopg.connect(_libpq(server), autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    return AsyncResult(runs, procs, slow_runs, one, spread, slow_one, slow_many, pool_size, slow_pool_size)


def _libpq(url: str) -> str:
    parts = urlsplit(url)
    query = [(k, v) for k, v in parse_qsl(parts.query) if k not in ("schema", "pool_size", "retry_for")]
    return urlunsplit(parts._replace(query=urlencode(query, quote_via=quote)))


def hops(count: int = 20_000) -> list[str]:
    """CPU time per ``off_loop`` hand-off of a call that does nothing, with 1 and 50 callers."""
    from unbroken.stores.memory import InMemoryStore
    from unbroken.stores.offload import off_loop

    store = InMemoryStore()
    store.backend.concurrency = 4

    def nothing() -> None:
        return None

    async def callers(at_once: int) -> None:
        async def one() -> None:
            for _ in range(count // at_once):
                await off_loop(store, nothing)

        await asyncio.gather(*(one() for _ in range(at_once)))

    lines = []
    for at_once in (1, 50):
        process, loop = time.process_time(), time.thread_time()
        asyncio.run(callers(at_once))
        process, loop = time.process_time() - process, time.thread_time() - loop
        lines.append(
            f"off_loop hand-off, {at_once} caller(s) at once: {process / count * 1e6:.1f} us CPU each "
            f"(the event loop's thread: {loop / count * 1e6:.1f} us)"
        )
    return lines


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--hops":
        print("\n".join(hops()))
        return 0
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        url, runs, turns, tag, start_at, out, idle = sys.argv[2:9]
        child(url, int(runs), int(turns), tag, float(start_at), out, float(idle))
        return 0
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--procs", type=int, default=4)
    parser.add_argument("--slow-runs", type=int, default=50)
    parser.add_argument("--turns", type=int, default=5)
    parser.add_argument("--pool-size", type=int, default=4)
    parser.add_argument("--slow-pool-size", type=int, default=16)
    parser.add_argument("--idle-seconds", type=float, default=1.0, help="the ticker alone before each batch")
    args = parser.parse_args()
    server = os.environ.get("UNBROKEN_TEST_POSTGRES_URL") or DEFAULT_URL
    sizes = (args.runs, args.procs, args.slow_runs, args.turns, args.pool_size, args.slow_pool_size)
    result = measure(server, *sizes, idle=args.idle_seconds)
    print(result.table())
    print()
    print("\n".join(result.verdicts()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
