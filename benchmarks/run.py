"""unbroken's benchmark: one command, one table, every ratio computed within the same run.

    python benchmarks/run.py                    # 100, 1,000 and 10,000 turns (a few minutes)
    python benchmarks/run.py --quick            # 100 and 1,000 turns, fewer repeats (~30 s)
    python benchmarks/run.py --turns 100,1000 --json results.json

Each turn is ~2.4 KB of Anthropic-shaped messages and makes two saves (A: the assistant message
and its pending call; B: the tool result). The machine is shared and noisy, so the floor (a
bare SQLite commit) is measured interleaved with unbroken's own saves, and resume times are
medians of fresh processes alternated with the ``json.loads`` baseline.
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
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_agent
import bench_import
import bench_peers
import bench_store
import workload
from measure import SaveTimes

SAVE_TARGET = 1.5
DISK_TARGET = 2.0
RESUME_TARGET = 2.0
IMPORT_TARGET = 0.150


@dataclass
class Row:
    approach: str
    turns: int
    saves: SaveTimes | None
    disk_bytes: int | None
    resume_seconds: float | None
    json_seconds: float | None = None
    floor: SaveTimes | None = None


def _ms(seconds: float | None, digits: int = 3) -> str:
    return "—" if seconds is None else f"{seconds * 1e3:.{digits}f}"


def _ratio(value: float | None, base: float | None) -> str:
    return "—" if value is None or not base else f"{value / base:.2f}x"


def _parse_turns(text: str) -> list[int]:
    turns = sorted({int(part.replace("_", "")) for part in text.split(",") if part.strip()})
    if not turns or turns[0] < 1:
        raise argparse.ArgumentTypeError("--turns takes positive integers, e.g. 100,1000,10000")
    return turns


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=_parse_turns, default=None, help="history lengths (default 100,1000,10000)")
    parser.add_argument("--quick", action="store_true", help="100 and 1,000 turns, 3 repeats (~30 s)")
    parser.add_argument("--repeats", type=int, default=None, help="fresh processes per resume figure (default 5)")
    parser.add_argument(
        "--peer-max-turns",
        type=int,
        default=None,
        help="largest history for the O(N^2) peers (default 1000; 100 with --quick)",
    )
    parser.add_argument("--agent-turns", type=int, default=None, help="turns of the end-to-end Agent run (default 100)")
    parser.add_argument(
        "--stores",
        default="sqlite full,sqlite normal,file,postgres",
        help="comma-separated stores to measure (default: all that can be opened)",
    )
    parser.add_argument("--no-peers", action="store_true", help="skip the textbook and LangGraph rows")
    parser.add_argument("--no-langgraph", action="store_true", help="skip the LangGraph rows")
    parser.add_argument("--strict", action="store_true", help="exit 1 if a target fails")
    parser.add_argument("--dir", type=Path, default=None, help="where to put the databases (default: a temp dir)")
    parser.add_argument("--json", type=Path, default=None, help="also write every figure to this JSON file")
    args = parser.parse_args(argv)

    turns_list: list[int] = args.turns or ([100, 1000] if args.quick else [100, 1000, 10000])
    repeats = args.repeats or (3 if args.quick else 5)
    import_repeats = args.repeats or 7
    peer_max_turns = args.peer_max_turns or (100 if args.quick else 1000)
    agent_turns = args.agent_turns or min(turns_list[-1], 100)
    wanted = {name.strip() for name in args.stores.split(",") if name.strip()}
    root = Path(tempfile.mkdtemp(prefix="unbroken-bench-", dir=args.dir))
    started = time.perf_counter()
    notes: list[str] = []
    rows: list[Row] = []
    raw: dict[int, int] = {}
    try:
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
        lg_missing = "--no-langgraph" if args.no_peers or args.no_langgraph else bench_peers.langgraph_available()
        if lg_missing and not args.no_peers and not args.no_langgraph:
            notes.append(f"LangGraph rows skipped: {lg_missing}")

        for turns in turns_list:
            history_path = root / f"history-{turns}.json"
            text = json.dumps(workload.history(turns), ensure_ascii=False, separators=(",", ":"))
            history_path.write_text(text, encoding="utf-8")
            raw[turns] = len(text.encode())
            for kind in kinds:
                workdir = root / f"{kind.name.replace(' ', '-')}-{turns}"
                workdir.mkdir()
                _say(f"{kind.name}: {turns} turns")
                result, json_seconds = bench_store.measure_store(
                    kind, workdir, turns, repeats, history_path, with_floor=kind.name == "sqlite full"
                )
                if result.floor is not None:
                    rows.append(Row("bare SQLite commit (floor)", turns, result.floor, None, None))
                rows.append(
                    Row(
                        f"unbroken {kind.name}",
                        turns,
                        result.saves,
                        result.disk_bytes,
                        result.resume_seconds,
                        json_seconds,
                        result.floor,
                    )
                )
                shutil.rmtree(workdir)
            if not args.no_peers and turns <= peer_max_turns:
                workdir = root / f"peers-{turns}"
                workdir.mkdir()
                _say(f"textbook: {turns} turns")
                peer = bench_peers.textbook(workdir, turns, repeats)
                rows.append(Row(peer.store, turns, peer.saves, peer.disk_bytes, peer.resume_seconds))
                if not lg_missing:
                    _say(f"LangGraph: {turns} turns")
                    peer = bench_peers.langgraph(workdir, turns, repeats)
                    rows.append(Row(peer.store, turns, peer.saves, peer.disk_bytes, peer.resume_seconds))
                shutil.rmtree(workdir)
            elif not args.no_peers:
                notes.append(
                    f"peers skipped at {turns:,} turns: their total cost is O(N^2) (see the extrapolation below)"
                )
            history_path.unlink()

        _say(f"end-to-end Agent: {agent_turns} turns")
        agent_rows = []
        for name, url in (
            ("sqlite full", f"sqlite:///{root}/agent-full.db"),
            ("memory", "memory://"),
        ):
            agent_rows.append(bench_agent.agent_per_turn(name, url, agent_turns))
        _say("import unbroken")
        import_wall, import_self = bench_import.import_seconds(import_repeats)
    finally:
        shutil.rmtree(root, ignore_errors=True)

    elapsed = time.perf_counter() - started
    print()
    print(_header(args, turns_list, repeats, elapsed))
    print()
    print(_table(rows, raw))
    print()
    for agent in agent_rows:
        print(
            f"End-to-end Agent.run ({agent.store}, ScriptedModel, {agent.turns:,} turns): "
            f"{agent.per_turn_seconds * 1e3:.3f} ms per turn"
        )
    print(
        f"import unbroken: {import_wall * 1e3:.1f} ms (fresh process minus bare interpreter, median of "
        f"{import_repeats}); -X importtime cumulative {import_self * 1e3:.1f} ms"
    )
    _extrapolate(rows, turns_list, notes)
    for note in notes:
        print(f"Note: {note}")
    print()
    verdicts = _targets(rows, raw, turns_list, import_wall)
    for line in verdicts:
        print(line)
    if args.json is not None:
        _write_json(args.json, rows, raw, agent_rows, import_wall, import_self, verdicts, notes)
    return 0 if not args.strict or all(line.startswith("PASS") for line in verdicts) else 1


def _say(message: str) -> None:
    print(f"  ... {message}", file=sys.stderr, flush=True)


def _header(args: argparse.Namespace, turns_list: list[int], repeats: int, elapsed: float) -> str:
    per_turn = workload.history_bytes(100) / 100
    return (
        f"unbroken benchmark, {time.strftime('%Y-%m-%d %H:%M')} on {platform.machine()} "
        f"Python {platform.python_version()}, SQLite {sqlite3.sqlite_version}; "
        f"turns {', '.join(f'{t:,}' for t in turns_list)} of ~{per_turn:,.0f} bytes, 2 saves a turn; "
        f"resume = median of {repeats} fresh processes; took {elapsed:.0f} s"
    )


def _table(rows: list[Row], raw: dict[int, int]) -> str:
    header = (
        "| turns | approach | save median ms | save p99 ms | last 200 saves median ms | save / floor "
        "| disk MB | disk / raw | resume ms | resume / json.loads |"
    )
    lines = [header, "|" + "---|" * 10]
    floors = {row.turns: row.saves.median for row in rows if row.approach.startswith("bare") and row.saves}
    for turns in sorted(raw):
        lines.append(f"| {turns:,} | raw history (JSON) | | | | | {raw[turns] / 1e6:.2f} | 1.00x | | |")
        json_times = [row.json_seconds for row in rows if row.turns == turns and row.json_seconds]
        if json_times:
            baseline = sorted(json_times)[len(json_times) // 2]
            lines.append(
                f"| {turns:,} | json.loads of the history (fresh process) | | | | | | | {_ms(baseline, 1)} | 1.00x |"
            )
        for row in rows:
            if row.turns != turns:
                continue
            saves = row.saves
            lines.append(
                "| "
                + " | ".join(
                    [
                        f"{turns:,}",
                        row.approach,
                        _ms(saves.median) if saves else "—",
                        _ms(saves.p99) if saves else "—",
                        _ms(saves.tail_median()) if saves else "—",
                        _ratio(saves.median, floors.get(turns)) if saves else "—",
                        "—" if row.disk_bytes is None else f"{row.disk_bytes / 1e6:.2f}",
                        _ratio(row.disk_bytes, raw[turns]),
                        _ms(row.resume_seconds, 1),
                        _ratio(row.resume_seconds, row.json_seconds),
                    ]
                )
                + " |"
            )
    return "\n".join(lines)


def _extrapolate(rows: list[Row], turns_list: list[int], notes: list[str]) -> None:
    measured = [row for row in rows if row.approach.startswith("textbook") and row.saves]
    missing = [t for t in turns_list if t not in {row.turns for row in measured}]
    if measured and missing:
        last = max(measured, key=lambda row: row.turns)
        assert last.saves is not None
        for turns in missing:
            # A textbook save rewrites the whole history, so its cost grows linearly with it.
            estimate = last.saves.tail_median() * turns / last.turns
            notes.append(
                f"textbook JSON rewrite at {turns:,} turns not run: extrapolated ~{estimate * 1e3:.0f} ms per save "
                f"at the end of the run (linear in history from {last.turns:,} turns), "
                f"~{estimate * turns:.0f} s in total"
            )


def _targets(rows: list[Row], raw: dict[int, int], turns_list: list[int], import_wall: float) -> list[str]:
    verdicts = []
    full = {row.turns: row for row in rows if row.approach == "unbroken sqlite full"}
    if not full:
        return ["FAIL no sqlite full figures: the targets could not be checked"]
    for turns in turns_list:
        row = full[turns]
        assert row.saves is not None and row.floor is not None
        ratio = row.saves.median / row.floor.median
        verdicts.append(
            f"{'PASS' if ratio <= SAVE_TARGET else 'FAIL'} save median at sqlite full, {turns:,} turns: "
            f"{row.saves.median * 1e3:.3f} ms = {ratio:.2f}x the bare commit "
            f"({row.floor.median * 1e3:.3f} ms); target <= {SAVE_TARGET}x"
        )
    for turns in turns_list:
        row = full[turns]
        assert row.disk_bytes is not None
        ratio = row.disk_bytes / raw[turns]
        verdicts.append(
            f"{'PASS' if ratio <= DISK_TARGET else 'FAIL'} bytes on disk at sqlite full, {turns:,} turns: "
            f"{row.disk_bytes / 1e6:.2f} MB = {ratio:.2f}x the raw history; target <= {DISK_TARGET}x"
        )
    longest = full[turns_list[-1]]
    assert longest.resume_seconds is not None and longest.json_seconds
    ratio = longest.resume_seconds / longest.json_seconds
    qualifier = "" if turns_list[-1] >= 10000 else " (10,000 turns not run: the longest history measured)"
    verdicts.append(
        f"{'PASS' if ratio <= RESUME_TARGET else 'FAIL'} resume at sqlite full, {turns_list[-1]:,} turns"
        f"{qualifier}: {longest.resume_seconds * 1e3:.1f} ms = {ratio:.2f}x one json.loads of the history "
        f"({longest.json_seconds * 1e3:.1f} ms); target <= {RESUME_TARGET}x"
    )
    verdicts.append(
        f"{'PASS' if import_wall < IMPORT_TARGET else 'FAIL'} import unbroken: {import_wall * 1e3:.1f} ms; "
        f"target < {IMPORT_TARGET * 1e3:.0f} ms"
    )
    return verdicts


def _write_json(
    path: Path,
    rows: list[Row],
    raw: dict[int, int],
    agent_rows: list[bench_agent.AgentResult],
    import_wall: float,
    import_self: float,
    verdicts: list[str],
    notes: list[str],
) -> None:
    def saves(times: SaveTimes | None) -> dict[str, float] | None:
        if times is None:
            return None
        return {
            "median": times.median,
            "p99": times.p99,
            "tail_median": times.tail_median(),
            "count": len(times.samples),
        }

    data = {
        "raw_history_bytes": raw,
        "rows": [
            {
                "approach": row.approach,
                "turns": row.turns,
                "saves": saves(row.saves),
                "disk_bytes": row.disk_bytes,
                "resume_seconds": row.resume_seconds,
                "json_loads_seconds": row.json_seconds,
            }
            for row in rows
        ],
        "agent_per_turn_seconds": {f"{a.store}@{a.turns}": a.per_turn_seconds for a in agent_rows},
        "import_seconds": import_wall,
        "importtime_seconds": import_self,
        "targets": verdicts,
        "notes": notes,
    }
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    sys.exit(main())
