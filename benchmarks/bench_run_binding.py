"""CPU a save costs with records bound to their run, against the plain CRC-32, side by side.

    python benchmarks/bench_run_binding.py [--turns 300] [--rounds 6]

Alternates rounds (ABBA) of ``bench_save_cpu.one_round`` (a real ``Agent.run`` on SQLite, thread CPU
time of each save) with the binding on and off (``acceptance._BIND_RECORDS``), in one process,
so the machine's load falls on both alike. Prints each round and the median of each side.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_save_cpu import one_round
from unbroken import acceptance


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args()
    saves: dict[bool, list[float]] = {True: [], False: []}
    with tempfile.TemporaryDirectory(prefix="unbroken-binding-cpu-") as directory:
        for index in range(2 * args.rounds):
            bound = index % 4 in (0, 3)  # ABBA: neither side always runs first
            with mock.patch.object(acceptance, "_BIND_RECORDS", bound):
                figures = one_round(args.turns, Path(directory), index)
            saves[bound].append(figures["save"])
            print(
                f"round {index + 1} ({'bound' if bound else 'plain'}): save {figures['save']:.1f} us, "
                f"encode {figures['encode']:.1f}, append {figures['append']:.1f} (thread CPU, medians)"
            )
    on, off = statistics.median(saves[True]), statistics.median(saves[False])
    paired = statistics.median(b / p for b, p in zip(saves[True], saves[False], strict=True))  # neighbours
    print(
        f"bound {on:.1f} us, plain {off:.1f} us a save: {on / off:.3f}x (medians of {args.rounds} rounds each); "
        f"median of the paired rounds' ratios {paired:.3f}x"
    )


if __name__ == "__main__":
    main()
