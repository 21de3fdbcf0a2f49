"""How fast the inspector opens the page of a long run (issue 14: under a second at 10,000 turns).

    python benchmarks/bench_ui.py [--turns 10000] [--repeats 3] [--runs 100000] [--json out.json]

Builds a run of ``--turns`` workload turns (~2.4 KB each, two save points per turn, never
compacted: the worst case, every record is read) in a SQLite store, starts ``unbroken ui`` on
it as a user would (a child process), and measures:

* **cold**: the first load after the server started (it reads the run's tail, last save points
  and last messages from the store: ``unbroken.paging``): the page's
  HTML, JavaScript and CSS and its data request (``/api/runs/ID``), one after the other;
* **warm**: the same requests again (the decoded run is cached until the next save point);
* **browser**: with Debian's headless Chromium (when installed), from navigation start until
  the conversation is on screen, on a freshly started server (cold).

Callable from Python: ``run(turns, repeats) -> list[Row]`` and ``table(rows)``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests" / "browser"))

from ui_server import Server, start_server  # noqa: E402
from webdriver import CHROMEDRIVER, CHROMIUM, Browser  # noqa: E402

import writer  # noqa: E402

RUN_ID = "long-run"


@dataclass(frozen=True)
class Row:
    what: str
    turns: int
    median_ms: float
    worst_ms: float
    bytes: int


def _get(server: Server, path: str) -> int:
    with urllib.request.urlopen(server.base + path, timeout=120) as response:
        return len(response.read())


def _page(server: Server) -> tuple[float, int]:
    started = time.perf_counter()
    size = sum(
        _get(server, path) for path in (f"/runs/{RUN_ID}", "/static/app.js", "/static/style.css", f"/api/runs/{RUN_ID}")
    )
    return (time.perf_counter() - started) * 1000, size


def _browser_open(server: Server, browser: Browser) -> float:
    browser.get(f"{server.base}/runs/{RUN_ID}")
    value = browser.wait_until("document.querySelector('#conversation .msg') && performance.now()", timeout=60)
    return float(value)


def run(turns: int, repeats: int, say: object = print) -> list[Row]:
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="bench-ui-") as root:
        url = f"sqlite:///{Path(root) / 'runs.db'}"
        if callable(say):
            say(f"building a {turns:,}-turn run ...")
        writer.write_run(url + "?durability=normal", RUN_ID, turns)
        cold, warm, seen, opened = [], [], 0, []
        for _ in range(repeats):
            server = start_server(url, actions=False)
            try:
                took, seen = _page(server)
                cold.append(took)
                warm += [_page(server)[0] for _ in range(3)]
            finally:
                server.stop()
        rows.append(Row("page + data, cold (server just started)", turns, statistics.median(cold), max(cold), seen))
        rows.append(Row("page + data, warm (run cached)", turns, statistics.median(warm), max(warm), seen))
        if Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists():
            browser = Browser()
            try:
                for _ in range(repeats):
                    server = start_server(url, actions=False)
                    try:
                        opened.append(_browser_open(server, browser))
                    finally:
                        server.stop()
            finally:
                browser.quit()
            rows.append(
                Row("Chromium: navigation to conversation shown", turns, statistics.median(opened), max(opened), seen)
            )
    return rows


def run_list(runs: int, say: object = print) -> list[Row]:
    """The runs list over ``runs`` runs: the first page and the next (each one
    ``store.runs_page``, keyset cursor) and a filtered page (scans up to ``SCAN_ROWS``)."""
    from unbroken import open_store
    from unbroken.codec import encode_full
    from unbroken.state import Phase, RunState

    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="bench-ui-list-") as root:
        url = f"sqlite:///{Path(root) / 'runs.db'}"
        if callable(say):
            say(f"building {runs:,} runs ...")
        with open_store(url + "?durability=normal") as store:
            for n in range(runs):
                phase: Phase = "paused" if n % 1000 == 0 else "completed"
                state = RunState(run_id=f"run-{n:06d}", task=f"ticket {n}", phase=phase, save_seq=1, turns=n % 50)
                store.append(encode_full(state, "start"), expect_seq=0)
        timings: dict[str, list[float]] = {
            "first page (server just started; one summaries_page)": [],
            "next page (summaries_page after the cursor)": [],
            "needs-attention filter (scans up to 10,000 summaries)": [],
        }
        from unbroken import ops

        with open_store(url) as store:  # the same first page, in process: before and after issue 16
            timings["in process, before: every summary read and sorted (list_all_runs)"] = []
            timings["in process, after: store.runs_page(None, 51)"] = []
            for _ in range(3):
                started = time.perf_counter()
                listed = ops.list_all_runs(store)
                sorted(listed, key=lambda run: (getattr(run, "updated_at", 0.0), run.run_id), reverse=True)[:51]
                timings["in process, before: every summary read and sorted (list_all_runs)"].append(
                    (time.perf_counter() - started) * 1000
                )
                started = time.perf_counter()
                store.runs_page(None, 51)
                timings["in process, after: store.runs_page(None, 51)"].append((time.perf_counter() - started) * 1000)
        for _ in range(3):
            server = start_server(url, actions=False)
            try:
                started = time.perf_counter()
                with urllib.request.urlopen(server.base + "/api/runs", timeout=120) as response:
                    cursor = json.loads(response.read())["next"]
                timings["first page (server just started; one summaries_page)"].append(
                    (time.perf_counter() - started) * 1000
                )
                started = time.perf_counter()
                _get(server, f"/api/runs?after={cursor}")
                timings["next page (summaries_page after the cursor)"].append((time.perf_counter() - started) * 1000)
                started = time.perf_counter()
                _get(server, "/api/runs?attention=1")
                timings["needs-attention filter (scans up to 10,000 summaries)"].append(
                    (time.perf_counter() - started) * 1000
                )
            finally:
                server.stop()
    for what, took in timings.items():
        rows.append(Row(f"runs list, {what}", runs, statistics.median(took), max(took), 0))
    return rows


def table(rows: list[Row]) -> str:
    lines = ["| what | turns (runs) | median | worst | bytes sent |", "|---|---:|---:|---:|---:|"]
    for row in rows:
        sent = f"{row.bytes:,}" if row.bytes else ""
        lines.append(f"| {row.what} | {row.turns:,} | {row.median_ms:,.0f} ms | {row.worst_ms:,.0f} ms | {sent} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--runs", type=int, default=0, help="also time the runs list over this many runs")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    rows = run(args.turns, args.repeats)
    if args.runs:
        rows += run_list(args.runs)
    print(table(rows))
    if args.json:
        args.json.write_text(json.dumps([asdict(row) for row in rows], indent=1))


if __name__ == "__main__":
    main()
