"""Thread CPU time of each save (issue 24 goal 4): where a save's Python goes, steady on a loaded machine.

    python benchmarks/bench_save_cpu.py [--turns 1000] [--rounds 3] [--task-bytes 8000]

Runs a real ``Agent.run`` on SQLite ``durability=normal`` (the commit itself is cheap, so the
Python around it shows) and times, with ``time.thread_time_ns``, each ``RunSession.save`` at save
points A and B, and inside it ``Encoder.encode`` and ``Store.append``. Prints medians (us) per round.
Wall-clock time on a shared 2-core VM swings 2x; thread CPU time moves a few percent.
``--task-bytes``: a task of that many characters (quotes and newlines in it), as a long brief or
a compacted run's summary is: a small field that every save holds and few change.
``--frames``: also count the WAL pages each timed save writes (the store's automatic checkpoint
off, so the WAL only grows; packing included), beside a bare INSERT of the same 2.4 KB into a
WAL file of its own: a figure that, unlike time, does not move with the machine's load.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import workload
from bench_store import TIMED_LABELS, WorkloadModel, read_ticket
from unbroken import Agent, open_store
from unbroken.codec import Encoder
from unbroken.encryption import LocalKeys
from unbroken.session import RunSession
from unbroken.stores.encrypted import EncryptedStore

WAL_FRAME = 4096 + 24  # a page and its frame header (the store's and the floor's page size)


def bare_insert_frames(directory: Path, saves: int, index: int = 0) -> list[int]:
    """WAL pages each autocommitted INSERT of the benchmark's 2.4 KB row writes (the floor's)."""
    path = directory / f"floor-frames-{index}.db"  # (a file a round: --rounds 2 --frames reused one)
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA wal_autocheckpoint=0")
    conn.execute("CREATE TABLE saves (id INTEGER PRIMARY KEY, body TEXT NOT NULL)")
    body = " ".join(str(m) for m in workload.history(1)[1:])[:2400]
    frames = []
    for _ in range(saves):
        before = os.path.getsize(f"{path}-wal")
        conn.execute("INSERT INTO saves (body) VALUES (?)", (body,))
        frames.append((os.path.getsize(f"{path}-wal") - before) // WAL_FRAME)
    conn.close()
    return frames


def one_round(
    turns: int,
    directory: Path,
    index: int,
    task: str = workload.TASK,
    *,
    frames: bool = False,
    keys: LocalKeys | None = None,
) -> dict[str, float]:
    cpu = time.thread_time_ns
    parts: dict[str, list[int]] = {"save": [], "encode": [], "append": [], "frames": []}
    inside = [False]
    real_save, real_encode = RunSession.save, Encoder.encode
    store = open_store(f"sqlite:///{directory}/cpu-{index}.db?durability=normal", encryption=keys)
    wal = f"{directory}/cpu-{index}.db-wal"
    if frames:
        sqlite = store.inner if isinstance(store, EncryptedStore) else store
        sqlite.backend.conn.execute("PRAGMA wal_autocheckpoint=0")  # type: ignore[attr-defined]
    real_append = type(store).append

    def timed(name: str, real: Any) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if not inside[0]:
                return real(*args, **kwargs)
            started = cpu()
            try:
                return real(*args, **kwargs)
            finally:
                parts[name].append(cpu() - started)

        return wrapper

    def timed_save(session: RunSession, label: str, **kwargs: Any) -> None:
        if label not in TIMED_LABELS:
            real_save(session, label, **kwargs)
            return
        inside[0] = True
        wal_before = os.path.getsize(wal) if frames else 0
        started = cpu()
        try:
            real_save(session, label, **kwargs)
        finally:
            parts["save"].append(cpu() - started)
            inside[0] = False
            if frames:
                parts["frames"].append((os.path.getsize(wal) - wal_before) // WAL_FRAME)

    RunSession.save = timed_save  # type: ignore[method-assign,assignment]
    Encoder.encode = timed("encode", real_encode)  # type: ignore[method-assign]
    type(store).append = timed("append", real_append)  # type: ignore[method-assign]
    try:
        agent = Agent(WorkloadModel(turns), [read_ticket], store, max_turns=turns + 1, lease_ttl=3600.0)
        result = agent.run(task, run_id=f"cpu-{index}")
    finally:
        RunSession.save = real_save  # type: ignore[method-assign]
        Encoder.encode = real_encode  # type: ignore[method-assign]
        type(store).append = real_append  # type: ignore[method-assign]
        store.close()
    if result.status != "completed":
        raise RuntimeError(f"the run ended {result.status}")
    figures = {name: statistics.median(samples) / 1e3 for name, samples in parts.items() if name != "frames"}
    if frames:
        figures["frames_mean"] = statistics.fmean(parts["frames"])
        figures["frames_median"] = statistics.median(parts["frames"])
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--task-bytes", type=int, default=0, help="a task this long (default: the workload's)")
    parser.add_argument("--frames", action="store_true", help="also count the WAL pages of each save")
    parser.add_argument(
        "--encrypted", action="store_true", help="alternate plain and encrypted rounds; print the ratios"
    )
    args = parser.parse_args()
    task = workload.TASK
    if args.task_bytes:
        task = (task + ' ("by category", then by month)\n') * (args.task_bytes // (len(task) + 30) + 1)
        task = task[: args.task_bytes]
    with tempfile.TemporaryDirectory(prefix="unbroken-save-cpu-") as directory:
        if args.encrypted:
            encrypted_rounds(args.turns, args.rounds, Path(directory), task, frames=args.frames)
            return
        for index in range(args.rounds):
            figures = one_round(args.turns, Path(directory), index, task, frames=args.frames)
            rest = figures["save"] - figures["encode"] - figures["append"]
            print(
                f"round {index + 1}: save {figures['save']:.1f} us (encode {figures['encode']:.1f}, "
                f"append {figures['append']:.1f}, rest ~{rest:.1f}); thread CPU, medians of {2 * args.turns}"
            )
            if args.frames:
                floor = bare_insert_frames(Path(directory), 2 * args.turns, index)
                print(
                    f"  WAL pages a save: mean {figures['frames_mean']:.2f} (packing included), median "
                    f"{figures['frames_median']:.0f}; a bare INSERT of 2.4 KB: mean {statistics.fmean(floor):.2f}, "
                    f"median {statistics.median(floor):.0f}"
                )


def encrypted_rounds(turns: int, rounds: int, directory: Path, task: str, *, frames: bool) -> None:
    """Plain and encrypted rounds alternated (plain, encrypted, encrypted, plain, ...), each
    round's encrypted/plain ratio of thread CPU per save printed, and their median."""
    keys = LocalKeys(os.urandom(32))
    ratios: list[float] = []
    figures: dict[str, dict[str, float]] = {}
    for index in range(rounds):
        order = ("plain", "sealed") if index % 2 == 0 else ("sealed", "plain")
        for kind in order:
            figures[kind] = one_round(
                turns, directory, 2 * index + (kind == "sealed"), task, frames=frames,
                keys=keys if kind == "sealed" else None,
            )  # fmt: skip
        ratios.append(figures["sealed"]["save"] / figures["plain"]["save"])
        line = (
            f"round {index + 1}: save {figures['plain']['save']:.1f} us plain, {figures['sealed']['save']:.1f} us "
            f"encrypted ({ratios[-1]:.2f}x); thread CPU, medians of {2 * turns}"
        )
        if frames:
            line += (
                f"; WAL pages a save: mean {figures['plain']['frames_mean']:.2f} plain, "
                f"{figures['sealed']['frames_mean']:.2f} encrypted (medians {figures['plain']['frames_median']:.0f} / "
                f"{figures['sealed']['frames_median']:.0f})"
            )
        print(line)
    print(f"median of {rounds} ratios: {statistics.median(ratios):.2f}x")


if __name__ == "__main__":
    main()
