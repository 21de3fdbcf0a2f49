"""Reading a long run: the whole-run readers (before issue 16) against the paged ones (after).

    python benchmarks/bench_export.py [--turns 10000] [--repeats 3] [--compaction]

Builds (once, cached) a SQLite run of ``--turns`` workload turns (two save points a turn), then
exports it to a file in fresh processes, alternating the two ways so machine noise hits both:

* **whole** (the export before issue 16): ``json.dumps(ops.export_run(store, run), indent=2)``:
  the whole history decoded into memory, then the whole document as one string;
* **streamed**: ``ops.export_run_to(store, run, file.write)`` (``paging.stream_export``): two
  passes over the records, a page at a time.

The same for ``unbroken show`` (the state: ``store.decode`` against ``paging.read_tail``) and
``unbroken history`` (the last 50 save points: ``store.history`` against ``paging.timeline_page``).

Each child reports the reader's wall time and its peak resident memory (``ru_maxrss``) above
what it held once the store was open (imports, connection). Both files are compared byte for
byte (with the same ``exported_at``): they must be identical.
"""

from __future__ import annotations

import argparse
import filecmp
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import writer  # noqa: E402

CHILD = """
import json, resource, sys, time
from unbroken import open_store, ops, paging
url, run_id, how, out = sys.argv[1:5]
store = open_store(url)
head = store.backend.read_head(run_id).seq
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
started = time.perf_counter()
if how == "whole":
    with open(out, "w", encoding="utf-8") as file:
        document = ops.export_run(store, run_id)
        document["exported_at"] = 0.0
        file.write(json.dumps(document, ensure_ascii=False, indent=2))
elif how == "streamed":
    with open(out, "w", encoding="utf-8") as file:
        paging.stream_export(store, run_id, file.write, exported_at=0.0)
elif how == "show: store.decode":
    store.decode(run_id, recover=True).state
elif how == "show: paging.read_tail":
    paging.read_tail(store, run_id, messages=6, recover=True).state
elif how == "history 50: store.history":
    store.history(run_id)[-50:]
elif how == "history 50: paging.timeline_page":
    paging.timeline_page(store, run_id, head - 49, head)
elapsed = time.perf_counter() - started
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"seconds": elapsed, "peak_mb": (peak - base) / 1024, "base_mb": base / 1024}))
"""


HOWS = (
    "whole",
    "streamed",
    "show: store.decode",
    "show: paging.read_tail",
    "history 50: store.history",
    "history 50: paging.timeline_page",
)
"""The readers timed: each pair is the whole-run reader before issue 16 and its paged reader."""


def _child(url: str, run_id: str, how: str, out: Path) -> dict[str, float]:
    done = subprocess.run(
        [sys.executable, "-c", CHILD, url, run_id, how, str(out)], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-2000:])
    figures: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return figures


def run(turns: int, repeats: int, *, compaction: bool) -> dict[str, dict[str, float]]:
    path, run_id = writer.cached_sqlite_run(turns, compaction=compaction)
    url = f"sqlite:///{path}"
    samples: dict[str, list[dict[str, float]]] = {how: [] for how in HOWS}
    with tempfile.TemporaryDirectory(prefix="bench-export-") as root:
        outs = {how: Path(root) / f"{n}.json" for n, how in enumerate(samples)}
        for _ in range(repeats):
            for how in samples:
                samples[how].append(_child(url, run_id, how, outs[how]))
        if not filecmp.cmp(outs["whole"], outs["streamed"], shallow=False):
            raise AssertionError("the streamed export differs from the whole one")
        size = outs["whole"].stat().st_size
    result = {
        how: {
            "seconds": statistics.median(s["seconds"] for s in runs),
            "peak_mb": statistics.median(s["peak_mb"] for s in runs),
            "base_mb": statistics.median(s["base_mb"] for s in runs),
            "bytes": float(size),
        }
        for how, runs in samples.items()
    }
    return result


def table(turns: int, result: dict[str, dict[str, float]]) -> str:
    whole = result["whole"]
    lines = [
        f"a {turns:,}-turn run ({whole['bytes'] / 1e6:,.1f} MB of export JSON, identical bytes both ways), "
        "fresh process each, median:",
        "| reader | time | peak RSS above the open store | time ratio | memory ratio |",
        "|---|---:|---:|---:|---:|",
    ]
    for before, after in zip(HOWS[::2], HOWS[1::2], strict=True):
        old, new = result[before], result[after]
        name = "export" if before == "whole" else before.split(":")[0]
        label = "whole: export_run + json.dumps" if before == "whole" else before.split(": ")[1]
        lines.append(f"| {name}, {label} | {old['seconds'] * 1000:,.0f} ms | {old['peak_mb']:,.1f} MB | | |")
        label = "streamed: export_run_to" if after == "streamed" else after.split(": ")[1]
        lines.append(
            f"| {name}, {label} | {new['seconds'] * 1000:,.0f} ms | {new['peak_mb']:,.1f} MB | "
            f"{new['seconds'] / old['seconds']:.3f}x | {new['peak_mb'] / max(old['peak_mb'], 0.01):.3f}x |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--compaction", action="store_true")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    result = run(args.turns, args.repeats, compaction=args.compaction)
    print(table(args.turns, result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
