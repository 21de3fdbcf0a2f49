"""What encryption at rest costs a save and a resume: the same run on SQLite (synchronous=FULL),
plain and encrypted (``open_store(url, encryption=LocalKeys(...))``), side by side.

Saves: the engine's own ``RunSession.save`` timed at save points A and B (``bench_store``), the
plain and the encrypted run played in pairs of rounds, the pairs in alternating order (plain
first, then encrypted first: ABBA...), in one process. Each pair gives two ratios of medians,
encrypted / plain: wall time and the saving thread's CPU time (``time.thread_time``, which the
other processes of a loaded machine do not blur); the verdict takes the median of each over the
pairs, and the larger of the two (a save at ``synchronous=FULL`` is waited on the disk, where
wall time is what a user pays; its CPU is what encryption adds). Resume: a fresh process opens
the store and loads the run, alternated with its twin (``interleaved_figures``); judged on open
+ load, as table 1's goal is (the load alone is printed too).
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench_store import TIMED_LABELS, drive_saves, resume_snippet
from measure import interleaved_figures
from unbroken import open_store
from unbroken.encryption import LocalKeys
from unbroken.session import RunSession

SAVE_TARGET = 1.3  # an encrypted save / a plain one (issue 23)
RESUME_TARGET = 1.5  # an encrypted resume / a plain one
SAVE_PAIRS = 5  # pairs of rounds (one plain run, one encrypted run each): an odd count, a true median


@dataclass(frozen=True)
class EncryptionCost:
    turns: int
    plain_save: float
    sealed_save: float
    save_wall_ratios: tuple[float, ...]
    save_cpu_ratios: tuple[float, ...]
    plain_save_cpu: float
    sealed_save_cpu: float
    plain_load: float
    sealed_load: float
    plain_open: float
    sealed_open: float
    plain_cpu: float
    sealed_cpu: float

    @property
    def resume_ratio(self) -> float:
        """(open + load) encrypted / the same plain: what a resume costs a user, as table 1's goal counts it."""
        return (self.sealed_open + self.sealed_load) / (self.plain_open + self.plain_load)

    @property
    def save_ratio(self) -> float:
        """Encrypted / plain save: the larger of the medians (over the pairs of rounds) of the
        wall-time and the CPU-time ratios."""
        return max(statistics.median(self.save_wall_ratios), statistics.median(self.save_cpu_ratios))

    @property
    def cpu_ratio(self) -> float:
        """The same on the resuming process's CPU time (open + load): what a loaded machine's
        scheduling does not blur."""
        return self.sealed_cpu / self.plain_cpu

    def lines(self) -> list[str]:
        wall, cpu = statistics.median(self.save_wall_ratios), statistics.median(self.save_cpu_ratios)
        return [
            f"Encryption at rest, SQLite full, {self.turns:,} turns: save median {self.plain_save * 1e3:.3f} ms plain, "
            f"{self.sealed_save * 1e3:.3f} ms encrypted; CPU {self.plain_save_cpu * 1e6:.1f} us / "
            f"{self.sealed_save_cpu * 1e6:.1f} us; ratios over {len(self.save_wall_ratios)} pairs of alternated "
            f"rounds: wall {_spread(self.save_wall_ratios)} (median {wall:.2f}x), CPU "
            f"{_spread(self.save_cpu_ratios)} (median {cpu:.2f}x); resume in a fresh "
            f"process, store open + load: {(self.plain_open + self.plain_load) * 1e3:.1f} ms plain, "
            f"{(self.sealed_open + self.sealed_load) * 1e3:.1f} ms encrypted ({self.resume_ratio:.2f}x); the load "
            f"alone {self.plain_load * 1e3:.1f} ms / {self.sealed_load * 1e3:.1f} ms "
            f"({self.sealed_load / self.plain_load:.2f}x: pyca's import, then each segment and newer record opened); "
            f"CPU time of "
            f"open + load {self.plain_cpu * 1e3:.1f} ms / {self.sealed_cpu * 1e3:.1f} ms ({self.cpu_ratio:.2f}x)"
        ]

    def verdicts(self) -> list[str]:
        save, load = self.save_ratio, max(self.resume_ratio, self.cpu_ratio)
        return [
            f"{'PASS' if save <= SAVE_TARGET else 'FAIL'} encryption at rest: an encrypted save costs {save:.2f}x a "
            f"plain one at {self.turns:,} turns on SQLite full (median over {len(self.save_wall_ratios)} pairs of "
            f"alternated rounds, the larger of wall and CPU time; target <= {SAVE_TARGET}x)",
            f"{'PASS' if load <= RESUME_TARGET else 'FAIL'} encryption at rest: an encrypted resume costs {load:.2f}x "
            f"a plain one at {self.turns:,} turns on SQLite full (open + load, the larger of wall and CPU time; "
            f"target <= {RESUME_TARGET}x)",
        ]


def _spread(ratios: tuple[float, ...]) -> str:
    return f"{min(ratios):.2f}-{max(ratios):.2f}x"


@contextmanager
def _save_cpu(samples: list[float]) -> Iterator[None]:
    """The saving thread's CPU time of each ``RunSession.save`` at save points A and B appended
    to ``samples`` (installed under ``drive_saves``' own wrapper, which times the same calls)."""
    real_save, cpu = RunSession.save, time.thread_time

    def timed(session: RunSession, label: str, **kwargs: Any) -> None:
        if label not in TIMED_LABELS:
            real_save(session, label, **kwargs)
            return
        started = cpu()
        real_save(session, label, **kwargs)
        samples.append(cpu() - started)

    RunSession.save = timed  # type: ignore[method-assign,assignment]
    try:
        yield
    finally:
        RunSession.save = real_save  # type: ignore[method-assign]


def _with_cpu(snippet: str) -> str:
    """``snippet`` also giving the CPU time of its open + load (``figures["cpu"]``)."""
    timed = snippet.replace(
        "started = _time.perf_counter()\n", "started = _time.perf_counter()\n_cpu = _time.process_time()\n"
    ).replace("figures = {'open': opened - started}", "figures = {'open': opened - started, 'cpu': _cpu}")
    timed = timed.replace(
        "elapsed = _time.perf_counter() - opened\n",
        "elapsed = _time.perf_counter() - opened\n_cpu = _time.process_time() - _cpu\n",
    )
    assert timed.count("_cpu") == 4, "resume_snippet changed: time its CPU here again"
    return timed


def _sealed_resume_snippet(url: str, run_id: str, key: bytes) -> str:
    """``resume_snippet`` with the store opened with the key (the key provider built before the clock starts)."""
    plain = resume_snippet(url, run_id)
    return (
        f"from unbroken.encryption import LocalKeys\n_keys = LocalKeys(bytes.fromhex({key.hex()!r}))\n"
        + plain.replace(f"store = open_store({url!r})", f"store = open_store({url!r}, encryption=_keys)")
    )


def measure(root: Path, turns: int, repeats: int) -> EncryptionCost:
    key = os.urandom(32)
    urls = {"plain": f"sqlite:///{root}/enc-plain.db", "sealed": f"sqlite:///{root}/enc-sealed.db"}
    walls: dict[str, list[float]] = {"plain": [], "sealed": []}
    cpus: dict[str, list[float]] = {"plain": [], "sealed": []}
    wall_ratios: list[float] = []
    cpu_ratios: list[float] = []
    for pair in range(SAVE_PAIRS):
        # Alternated order (plain first, then encrypted first, ...): a drift in the shared
        # machine's load, or the second run of a pair finding warm caches, weighs on both alike.
        round_: dict[str, tuple[list[float], list[float]]] = {}
        for kind in ("plain", "sealed") if pair % 2 == 0 else ("sealed", "plain"):
            cpu: list[float] = []
            keys = LocalKeys(key) if kind == "sealed" else None
            with open_store(urls[kind], encryption=keys) as store, _save_cpu(cpu):
                wall = drive_saves(store, f"bench-{turns}-{pair}-{kind}", turns).samples
            round_[kind] = (wall, cpu)
            walls[kind] += wall
            cpus[kind] += cpu
        wall_ratios.append(statistics.median(round_["sealed"][0]) / statistics.median(round_["plain"][0]))
        cpu_ratios.append(statistics.median(round_["sealed"][1]) / statistics.median(round_["plain"][1]))
    snippets = {
        "plain": _with_cpu(resume_snippet(urls["plain"], f"bench-{turns}-0-plain")),
        "sealed": _with_cpu(_sealed_resume_snippet(urls["sealed"], f"bench-{turns}-0-sealed", key)),
    }
    medians = interleaved_figures(snippets, repeats)
    return EncryptionCost(
        turns,
        statistics.median(walls["plain"]),
        statistics.median(walls["sealed"]),
        tuple(wall_ratios),
        tuple(cpu_ratios),
        statistics.median(cpus["plain"]),
        statistics.median(cpus["sealed"]),
        medians["plain"]["elapsed"],
        medians["sealed"]["elapsed"],
        medians["plain"]["open"],
        medians["sealed"]["open"],
        medians["plain"]["cpu"],
        medians["sealed"]["cpu"],
    )


if __name__ == "__main__":  # python benchmarks/bench_encryption.py [turns] [repeats]: these lines alone
    import sys
    import tempfile

    from run import _compile_package  # (as ``make bench`` does: the modules' bytecode, as an install has it)

    _compile_package([])
    with tempfile.TemporaryDirectory(prefix="unbroken-bench-enc-") as tmp:
        cost = measure(
            Path(tmp), int(sys.argv[1]) if len(sys.argv) > 1 else 1000, int(sys.argv[2]) if len(sys.argv) > 2 else 7
        )
    print("\n".join(cost.lines() + cost.verdicts()))
