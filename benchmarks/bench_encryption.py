"""What encryption at rest costs a save and a resume: the same run on SQLite (synchronous=FULL),
plain and encrypted (``open_store(url, encryption=LocalKeys(...))``), side by side.

Saves: the engine's own ``RunSession.save`` timed at save points A and B (``bench_store``), the
plain and the encrypted run played three times each in ABBA order, in one process (median of
all saves of each kind). Resume: a fresh process opens the store and loads the run, alternated with
its twin (``interleaved_figures``); judged on open + load, as table 1's goal is (the load alone
is printed too).
"""

from __future__ import annotations

import os
import statistics
from dataclasses import dataclass
from pathlib import Path

from bench_store import drive_saves, resume_snippet
from measure import interleaved_figures
from unbroken import open_store
from unbroken.encryption import LocalKeys

SAVE_TARGET = 1.3  # an encrypted save / a plain one (issue 23)
RESUME_TARGET = 1.5  # an encrypted resume / a plain one


@dataclass(frozen=True)
class EncryptionCost:
    turns: int
    plain_save: float
    sealed_save: float
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
    def cpu_ratio(self) -> float:
        """The same on the resuming process's CPU time (open + load): what a loaded machine's
        scheduling does not blur."""
        return self.sealed_cpu / self.plain_cpu

    def lines(self) -> list[str]:
        return [
            f"Encryption at rest, SQLite full, {self.turns:,} turns: save median {self.plain_save * 1e3:.3f} ms plain, "
            f"{self.sealed_save * 1e3:.3f} ms encrypted ({self.sealed_save / self.plain_save:.2f}x); resume in a fresh "
            f"process, store open + load: {(self.plain_open + self.plain_load) * 1e3:.1f} ms plain, "
            f"{(self.sealed_open + self.sealed_load) * 1e3:.1f} ms encrypted ({self.resume_ratio:.2f}x); the load "
            f"alone {self.plain_load * 1e3:.1f} ms / {self.sealed_load * 1e3:.1f} ms "
            f"({self.sealed_load / self.plain_load:.2f}x: pyca's import, then each segment and newer record opened); "
            f"CPU time of "
            f"open + load {self.plain_cpu * 1e3:.1f} ms / {self.sealed_cpu * 1e3:.1f} ms ({self.cpu_ratio:.2f}x)"
        ]

    def verdicts(self) -> list[str]:
        save, load = self.sealed_save / self.plain_save, max(self.resume_ratio, self.cpu_ratio)
        return [
            f"{'PASS' if save <= SAVE_TARGET else 'FAIL'} encryption at rest: an encrypted save costs {save:.2f}x a "
            f"plain one at {self.turns:,} turns on SQLite full (target <= {SAVE_TARGET}x)",
            f"{'PASS' if load <= RESUME_TARGET else 'FAIL'} encryption at rest: an encrypted resume costs {load:.2f}x "
            f"a plain one at {self.turns:,} turns on SQLite full (open + load, the larger of wall and CPU time; "
            f"target <= {RESUME_TARGET}x)",
        ]


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
    samples: dict[str, list[float]] = {"plain": [], "sealed": []}
    # ABBA order (plain, sealed, sealed, plain, ...): a drift in the shared machine's load
    # weighs on both kinds alike.
    for round_, kind in enumerate(("plain", "sealed", "sealed", "plain", "plain", "sealed")):
        with open_store(urls[kind], encryption=LocalKeys(key) if kind == "sealed" else None) as store:
            samples[kind] += drive_saves(store, f"bench-{turns}-{round_}", turns).samples
    snippets = {
        "plain": _with_cpu(resume_snippet(urls["plain"], f"bench-{turns}-0")),
        "sealed": _with_cpu(_sealed_resume_snippet(urls["sealed"], f"bench-{turns}-1", key)),
    }
    medians = interleaved_figures(snippets, repeats)
    return EncryptionCost(
        turns,
        statistics.median(samples["plain"]),
        statistics.median(samples["sealed"]),
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
