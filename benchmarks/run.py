"""unbroken's benchmark: one command, a few tables, every ratio computed within the same run.

    python benchmarks/run.py                    # every goal, PASS/FAIL (a few minutes; `make bench`)
    python benchmarks/run.py --full             # + 100,000 and 1,000,000-turn compacted runs, Redis
                                                #   and S3 at 10,000 turns (~15 minutes)
    python benchmarks/run.py --quick            # small sizes, fewer repeats (~1 min), for development
    python benchmarks/run.py --turns 100,1000 --json results.json

Each turn is ~2.4 KB of Anthropic-shaped messages and makes two saves (A: the assistant
message and its pending call; B: the tool result). The machine is shared and noisy, so the
floor (a bare SQLite commit) is measured interleaved with unbroken's own saves, and every
fresh-process figure is a median alternated with its baseline. Tables:

1. saves, bytes on disk and load, per store, beside the textbook rewrite and LangGraph;
2. the cost of a crash: spawn to the next model request after a SIGKILL, against the floor
   (a fresh python that parses the history once with orjson or msgspec and imports nothing
   else: no unbroken), and the resume's peak memory;
3. a compacted run of 1,000 to 1,000,000 turns resumed (issue 16), against the same floor;
4. PostgreSQL save points per second with 8 and 32 runs saving at once, hosted in a worker process
   per core (the goal) and in a process per run (for information);
5. 200 ``Agent.arun`` runs at once in one process on PostgreSQL: the event loop's lag and the
   save rate against the same runs over processes, and 50 runs with 20 ms added per request
   (``bench_async.py``, which also runs alone).
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import sqlite3
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_agent
import bench_crash
import bench_encryption
import bench_fleet
import bench_import
import bench_peers
import bench_queue
import bench_scale
import bench_store
import report
import workload
from report import Results, Row


def _parse_turns(text: str) -> list[int]:
    turns = sorted({int(part.replace("_", "")) for part in text.split(",") if part.strip()})
    if not turns or turns[0] < 1:
        raise argparse.ArgumentTypeError("takes positive integers, e.g. 100,1000,10000")
    return turns


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add = parser.add_argument
    add("--turns", type=_parse_turns, default=None, help="history lengths of table 1 (default 100,1000,10000)")
    add("--crash-turns", type=_parse_turns, default=None, help="table 2 (default 1000,5000,10000)")
    add("--scale-turns", type=_parse_turns, default=None, help="table 3 (default 1000,10000,100000,1000000)")
    add("--fleet-runs", type=_parse_turns, default=None, help="table 4: concurrent runs (default 8,32)")
    add("--quick", action="store_true", help="100 and 1,000 turns, 3 repeats, small tables 2-4 (~1 min)")
    add("--full", action="store_true", help="+ compacted 100,000/1,000,000 turns, every store at 10,000")
    add("--repeats", type=int, default=None, help="fresh processes per figure (default 7)")
    add("--peer-max-turns", type=int, default=None, help="largest history for the O(N^2) peers (default 1000)")
    add("--agent-turns", type=int, default=None, help="turns of the end-to-end Agent run (default 100)")
    add(
        "--stores",
        default="sqlite full,sqlite normal,file,postgres,redis,s3 (moto)",
        help="stores of table 1 (default: all)",
    )
    add("--no-peers", action="store_true", help="skip the textbook and LangGraph rows")
    add("--no-langgraph", action="store_true", help="skip the LangGraph rows")
    add("--no-crash", action="store_true", help="skip table 2")
    add("--no-scale", action="store_true", help="skip table 3")
    add("--no-fleet", action="store_true", help="skip table 4")
    add("--no-queue", action="store_true", help="skip the first page of runs with a long queue (Redis, S3)")
    add("--no-encryption", action="store_true", help="skip the encryption-at-rest lines (issue 23)")
    add("--encryption-turns", type=int, default=None, help="run length of the encryption lines (default 1000)")
    add("--no-async", action="store_true", help="skip table 5 (arun on PostgreSQL: loop lag, save rate)")
    add("--strict", action="store_true", help="exit 1 if a target fails")
    add("--dir", type=Path, default=None, help="where to put the databases (default: a temp dir)")
    add("--json", type=Path, default=None, help="also write every figure to this JSON file")
    add("--readme", type=Path, default=None, help="also write the tables and verdicts into this file's marked block")
    return parser.parse_args(argv)


def _compile_package(notes: list[str]) -> None:
    """Compile unbroken's modules to bytecode once, as installing a package does: every process
    measured then imports them as a user's would. (With PYTHONDONTWRITEBYTECODE set, as in some
    sandboxes, each fresh process would otherwise compile all of unbroken from source: 60-100 ms
    more, and noisy, on every spawn the crash rows and the import figure time.)"""
    import compileall
    import os

    import unbroken

    compileall.compile_dir(str(Path(unbroken.__file__).parent), quiet=1)
    if os.environ.get("PYTHONDONTWRITEBYTECODE"):
        notes.append("PYTHONDONTWRITEBYTECODE is set: unbroken's modules were compiled to bytecode first")


def main(argv: list[str] | None = None) -> int:
    args = _arguments(argv)
    quick = args.quick
    turns_list: list[int] = args.turns or ([100, 1000] if quick else [100, 1000, 10000])
    crash_turns: list[int] = [] if args.no_crash else args.crash_turns or ([1000] if quick else [1000, 5000, 10000])
    scale_turns: list[int] = (
        [] if args.no_scale else args.scale_turns or ([1000, 10000, 100000, 1000000] if args.full else [1000, 10000])
    )
    fleet_runs: list[int] = [] if args.no_fleet else args.fleet_runs or ([8] if quick else [8, 32])
    # 7: a fresh process on this kind of VM runs either fast or ~30% slow (where the scheduler
    # puts it), in both the measured and the baseline processes; a median of 7 is steady.
    repeats = args.repeats or (3 if quick else 7)
    peer_max_turns = args.peer_max_turns or (100 if quick else 1000)
    agent_turns = args.agent_turns or min(turns_list[-1], 100)
    wanted = {name.strip() for name in args.stores.split(",") if name.strip()}
    root = Path(tempfile.mkdtemp(prefix="unbroken-bench-", dir=args.dir))
    started = time.perf_counter()
    results = Results()
    queue_rows: list[bench_queue.QueueRow] = []
    _compile_package(results.notes)
    try:
        kinds = _available_kinds(root, wanted, results.notes)
        lg_missing = "--no-langgraph" if args.no_peers or args.no_langgraph else bench_peers.langgraph_available()
        if lg_missing and not args.no_peers and not args.no_langgraph:
            results.notes.append(f"LangGraph rows skipped: {lg_missing}")
        if not args.full and not args.scale_turns and not args.no_scale:
            results.notes.append("compacted runs of 100,000 and 1,000,000 turns: run with --full (~10 min more)")
        for turns in sorted(set(turns_list) | set(crash_turns)):
            history_path = root / f"history-{turns}.json"
            text = json.dumps(workload.history(turns), ensure_ascii=False, separators=(",", ":"))
            history_path.write_text(text, encoding="utf-8")
            if turns in turns_list:
                results.raw[turns] = len(text.encode())
                _stores(root, kinds, turns, repeats, history_path, results, args.full)
                if not args.no_peers and turns <= peer_max_turns:
                    _peers(root, turns, repeats, lg_missing is not None, results)
                elif not args.no_peers:
                    results.notes.append(f"peers skipped at {turns:,} turns: their total cost is O(N^2)")
            if turns in crash_turns:
                _say(f"cost of a crash: {turns} turns")
                results.crash.extend(bench_crash.measure(root, turns, repeats, history_path))  # ~2 s a repeat at 10,000
            history_path.unlink()
        for turns in scale_turns:
            _say(f"compacted run: {turns} turns")
            results.scale.append(bench_scale.measure(root, turns, repeats, _say))
        if fleet_runs:
            _fleet(fleet_runs, quick, results)
        async_result = None if args.no_async else _async(quick, results)
        _say(f"end-to-end Agent: {agent_turns} turns")
        agent_rows = [
            bench_agent.agent_per_turn(name, url, agent_turns)
            for name, url in (("sqlite full", f"sqlite:///{root}/agent-full.db"), ("memory", "memory://"))
        ]
        encryption = None
        if not args.no_encryption:
            encryption_turns = args.encryption_turns or (100 if quick else 1000)
            _say(f"encryption at rest: {encryption_turns} turns, plain and encrypted")
            encryption = bench_encryption.measure(root, encryption_turns, repeats)
        _say("import unbroken")
        results.imports = bench_import.measure(repeats)
        if not args.no_queue:
            _say("first page of runs with a long queue (Redis 100,000, S3 5,000)")
            queue_rows = bench_queue.measure(1_000 if quick else 100_000, 500 if quick else 5_000, repeats)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    _link_langgraph_crash(results)
    _link_scale_floor(results)
    elapsed = time.perf_counter() - started
    verdicts = (
        report.targets(results, turns_list)
        + bench_queue.verdicts(queue_rows)
        + (encryption.verdicts() if encryption is not None else [])
    )
    text = _report_text(results, agent_rows, _header(turns_list, repeats, elapsed))
    if encryption is not None:
        text += "\n" + "\n".join(encryption.lines())
    if queue_rows:
        text += "\n" + "\n".join(bench_queue.lines(queue_rows))
        text += (
            "\nNote: the queue's S3 row runs on moto, a mock in this process (~4 ms a request here): "
            "its request count is what a real service is sent, its time is moto's; it is judged against "
            "moto's floor for the requests a page needs (bare boto3), printed beside it."
        )
    if async_result is not None:
        verdicts += async_result.verdicts()
        text += "\n\nMany `arun` runs in one process on PostgreSQL (issue 24 goal 2):\n\n" + async_result.table()
    print()
    print(text)
    print()
    print("\n".join(verdicts))
    if args.json is not None:
        _write_json(args.json, results, verdicts)
    if args.readme is not None:
        _update_readme(args.readme, text, verdicts)
    return 0 if not args.strict or all(line.startswith("PASS") for line in verdicts) else 1


def _report_text(results: Results, agent_rows: list[bench_agent.AgentResult], header: str) -> str:
    """Every table and figure of the run, as printed (and as written into the README)."""
    out = [header, "", report.main_table(results.rows, results.raw)]
    out.append(
        "\nload ms: the run loaded in a fresh process whose store is already open (unbroken rows; the "
        "peers' rows include their sqlite3.connect). store open ms: opening that store just before "
        "(importing unbroken's store and format modules and the driver, connect, schema check), which "
        "a fresh run pays as well: counted in (open + load) / json.loads, the goals' ratio."
    )
    if results.crash:
        out += ["\nCost of a crash (issue 12 goal 1, issue 16 goal 1):\n", report.crash_table(results.crash)]
    if results.scale:
        out += ["\nA compacted run resumed (issue 16 goal 2):\n", report.scale_table(results.scale)]
    out.append("")
    for fleet in results.fleet.values():
        out.append(bench_fleet.describe(fleet))
    for agent in agent_rows:
        out.append(
            f"End-to-end Agent.run ({agent.store}, ScriptedModel, {agent.turns:,} turns): "
            f"{agent.per_turn_seconds * 1e3:.3f} ms per turn"
        )
    if results.imports is not None:
        imports = results.imports
        out.append(
            f"import unbroken: -X importtime cumulative {imports.importtime * 1e3:.1f} ms; fresh process minus "
            f"bare interpreter {imports.wall * 1e3:.1f} ms. The resume path's imports ({bench_import.RESUME_PATH}): "
            f"{imports.resume_path * 1e3:.1f} ms (-X importtime, inside the crash rows)"
        )
    out += [f"Note: {note}" for note in results.notes]
    return "\n".join(out)


README_START = "<!-- benchmarks/run.py --readme: start -->"
README_END = "<!-- benchmarks/run.py --readme: end -->"


def _update_readme(path: Path, text: str, verdicts: list[str]) -> None:
    """Replace the block between the README's two markers with this run's tables (markdown) and
    verdicts (a code block)."""
    readme = path.read_text(encoding="utf-8")
    head, start, rest = readme.partition(README_START)
    _, end, tail = rest.partition(README_END)
    if not start or not end:
        raise SystemExit(f"{path} has no {README_START} ... {README_END} block to fill")
    block = f"{text}\n\n```\n" + "\n".join(verdicts) + "\n```\n"
    path.write_text(f"{head}{README_START}\n{block}{README_END}{tail}", encoding="utf-8")
    _say(f"wrote this run's tables into {path}")


def _available_kinds(root: Path, wanted: set[str], notes: list[str]) -> list[bench_store.StoreKind]:
    kinds = []
    for kind in bench_store.STORE_KINDS:
        if kind.name not in wanted:
            continue
        probe = root / "probe"
        probe.mkdir(exist_ok=True)
        why = bench_store.store_available(kind, probe)
        if why is None:
            kinds.append(kind)
        else:
            notes.append(f"{kind.name} store skipped: {why}")
    return kinds


# Stores with no goal at 10,000 turns: by default their rows stop at 1,000 (--full runs them).
_NO_GOAL_AT_LENGTH = {"sqlite normal", "redis"}


def _stores(
    root: Path,
    kinds: list[bench_store.StoreKind],
    turns: int,
    repeats: int,
    history: Path,
    results: Results,
    full: bool,
) -> None:
    for kind in kinds:
        if kind.name == "s3 (moto)" and turns > 1000:
            # moto is a Python mock of S3 (~20 ms a save): 10,000 turns would take minutes and
            # measure moto, not S3. Its rows stop at 1,000 turns.
            results.notes.append(f"s3 (moto) not run at {turns:,} turns: a mock server, slow at length")
            continue
        if kind.name in _NO_GOAL_AT_LENGTH and turns > 1000 and not full:
            results.notes.append(f"{kind.name} not run at {turns:,} turns (no goal there): run with --full")
            continue
        workdir = root / f"{kind.name.replace(' ', '-')}-{turns}"
        workdir.mkdir()
        _say(f"{kind.name}: {turns} turns")
        result, json_seconds = bench_store.measure_store(
            kind, workdir, turns, repeats, history, with_floor=kind.name == "sqlite full"
        )
        if result.floor is not None:
            results.rows.append(Row("bare SQLite commit (floor)", turns, result.floor, None, None))
        results.rows.append(
            Row(
                f"unbroken {kind.name}",
                turns,
                result.saves,
                result.disk_bytes,
                result.resume_seconds,
                json_seconds,
                result.floor,
                result.open_seconds,
            )
        )
        shutil.rmtree(workdir)


def _peers(root: Path, turns: int, repeats: int, skip_langgraph: bool, results: Results) -> None:
    workdir = root / f"peers-{turns}"
    workdir.mkdir()
    _say(f"textbook: {turns} turns")
    peer = bench_peers.textbook(workdir, turns, repeats)
    results.rows.append(Row(peer.store, turns, peer.saves, peer.disk_bytes, peer.resume_seconds))
    if not skip_langgraph:
        _say(f"LangGraph: {turns} turns")
        peer = bench_peers.langgraph(workdir, turns, repeats)
        results.rows.append(Row(peer.store, turns, peer.saves, peer.disk_bytes, peer.resume_seconds))
        if peer.crash_seconds is not None:
            name = "LangGraph SqliteSaver (import checkpointer + get_tuple)"
            results.crash.append(bench_crash.CrashRow(name, turns, peer.crash_seconds))
    shutil.rmtree(workdir)


def _link_langgraph_crash(results: Results) -> None:
    """LangGraph's crash rows are measured with the peers; give them the floor of their size."""
    floors = {row.turns: row.floor_seconds for row in results.crash if row.approach.startswith("floor")}
    for row in results.crash:
        if row.floor_seconds is None:
            row.floor_seconds = floors.get(row.turns)
    results.crash = [row for row in results.crash if row.floor_seconds is not None]


def _link_scale_floor(results: Results) -> None:
    """A compacted run is judged against the floor of a history of its length: the crash table's
    floor, measured in this same run (the history bytes a resume without unbroken would parse)."""
    floors = {row.turns: row.floor_seconds for row in results.crash if row.approach.startswith("floor")}
    for row in results.scale:
        row.floor_seconds = floors.get(row.turns)


FLEET_ROUNDS = 5
"""Rounds of the fleet rows, each unbroken's saves and the bare loop back to back (order
alternating): the machine is shared, so the verdict is the median of the rounds' ratios."""


def _fleet(fleet_runs: list[int], quick: bool, results: Results) -> None:
    import os

    import bench_fleet

    server = os.environ.get("UNBROKEN_TEST_POSTGRES_URL") or bench_fleet.DEFAULT_URL
    try:
        bench = bench_fleet.Bench(server)
    except Exception as exc:
        results.notes.append(f"PostgreSQL fleet rows skipped: {type(exc).__name__}: {str(exc).splitlines()[0][:160]}")
        return
    try:
        for runs in fleet_runs:
            _say(f"PostgreSQL: {runs} runs saving at once, and the bare INSERT loop")
            turns = 10 if quick else max(20, 800 // runs)
            results.fleet[runs] = bench.fleet(runs, turns, rounds=3 if quick else FLEET_ROUNDS)
    finally:
        bench.close()


def _async(quick: bool, results: Results) -> Any:
    import os

    import bench_async

    server = os.environ.get("UNBROKEN_TEST_POSTGRES_URL") or bench_async.DEFAULT_URL
    _say("arun: many runs in one process on PostgreSQL, then over processes, then +20 ms a request")
    try:
        return bench_async.measure(server, runs=50 if quick else 200, slow_runs=20 if quick else 50)
    except Exception as exc:
        results.notes.append(f"arun rows skipped: {type(exc).__name__}: {str(exc).splitlines()[0][:160]}")
        return None


def _say(message: str) -> None:
    print(f"  ... {message}", file=sys.stderr, flush=True)


def _header(turns_list: list[int], repeats: int, elapsed: float) -> str:
    per_turn = workload.history_bytes(100) / 100
    return (
        f"unbroken benchmark, {time.strftime('%Y-%m-%d %H:%M')} on {platform.machine()} "
        f"Python {platform.python_version()}, SQLite {sqlite3.sqlite_version}; "
        f"turns {', '.join(f'{t:,}' for t in turns_list)} of ~{per_turn:,.0f} bytes, 2 saves a turn; "
        f"fresh-process figures = median of {repeats}; took {elapsed:.0f} s"
    )


def _write_json(path: Path, results: Results, verdicts: list[str]) -> None:
    def saves(times: object) -> dict[str, float] | None:
        if times is None:
            return None
        assert isinstance(times, bench_store.SaveTimes)
        return {"median": times.median, "p99": times.p99, "tail_median": times.tail_median()}

    data = {
        "raw_history_bytes": results.raw,
        "rows": [
            {
                "approach": row.approach,
                "turns": row.turns,
                "saves": saves(row.saves),
                "disk_bytes": row.disk_bytes,
                "open_seconds": row.open_seconds,
                "load_seconds": row.resume_seconds,
                "json_loads_seconds": row.json_seconds,
            }
            for row in results.rows
        ],
        "crash": [vars(row) for row in results.crash],
        "scale": [vars(row) for row in results.scale],
        "fleet": {
            runs: {
                "worker_processes": fleet.processes,
                "worker_saves_per_second": fleet.workers,
                "saves_per_second": fleet.saves,
                "bare_inserts_per_second": fleet.bare,
                "ratio": fleet.ratio,
                "one_process_per_run_ratio": fleet.per_run_ratio,
            }
            for runs, fleet in results.fleet.items()
        },
        "import": None if results.imports is None else vars(results.imports),
        "targets": verdicts,
        "notes": results.notes,
    }
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    sys.exit(main())
