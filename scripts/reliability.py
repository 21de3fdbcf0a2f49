"""``python scripts/reliability.py`` (``make reliability``): the long sweeps behind each
guarantee in docs/guarantees.md, one line per guarantee with its figure. Exits 1 if any
figure is not 0 failures (or 100% detection). Run it from the repository root: it drives the
example agent in tests/reliability/ and runs the slow reliability tests with pytest.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # the repository-only fault kit

import faults_kit as faults
from unbroken import crashpoints
from unbroken.agent_ref import load_agent
from unbroken.codec import StoredRecord, decode
from unbroken.errors import CorruptCheckpoint, StoreUnavailable
from unbroken.stores import open_store
from unbroken.testing import chaos

AGENT = "tests/reliability/chaos_agent.py:make_agent"
POSTGRES_URL_ENV = "UNBROKEN_TEST_POSTGRES_URL"


def _kind(name: str) -> chaos.StoreKind:
    """The store kinds of the reliability sweeps (PostgreSQL: one schema per run) live with the tests."""
    sys.path.insert(0, "tests/reliability")
    from chaos_postgres import KINDS  # type: ignore[import-not-found]

    kind: chaos.StoreKind = KINDS[name]
    return kind


TASK = "ship order 42"


class _Lines:
    def __init__(self) -> None:
        self.failed = False

    def say(self, guarantee: str, figure: str, ok: bool) -> None:
        self.failed |= not ok
        print(f"{'PASS' if ok else 'FAIL'}  {guarantee:<34} {figure}", flush=True)


def _scratch() -> Path:
    base = "/dev/shm" if os.path.isdir("/dev/shm") else None
    return Path(tempfile.mkdtemp(prefix="unbroken-reliability-", dir=base))


def _crash_points(lines: _Lines) -> None:
    crashpoints.arm(None)
    count = 1_000_000
    started = time.perf_counter()
    for _ in range(count):
        crashpoints.hit("save.model_turn.before")
    per_hit = (time.perf_counter() - started) / count * 1e9
    lines.say("1 crash points, unarmed cost", f"{per_hit:.0f} ns per point reached (one global check)", True)


def _sweeps(lines: _Lines, factory: chaos.AgentFactory, kinds: list[str], kills: int, seed: int) -> None:
    for kind in kinds:
        scratch = _scratch()
        said: set[str] = set()
        try:
            _sweep_store(lines, said, factory, kind, scratch, kills, seed)
        except StoreUnavailable as exc:  # the PostgreSQL server is down: its guarantees fail, loudly
            for guarantee in ("2 crash sweep", "3 random SIGKILLs"):
                if guarantee not in said:
                    lines.say(f"{guarantee} ({kind})", f"not run: {exc}", False)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
            with contextlib.suppress(StoreUnavailable):  # a server that is down holds nothing of ours to drop
                chaos.drop_stores(_kind(kind), scratch)


def _sweep_store(
    lines: _Lines, said: set[str], factory: chaos.AgentFactory, kind: str, scratch: Path, kills: int, seed: int
) -> None:
    report = chaos.sweep(factory, TASK, store_kind=_kind(kind), workdir=scratch, per_label=None, rearm=3)
    said.add("2 crash sweep")
    lines.say(
        f"2 crash sweep ({kind})",
        f"{len(report.points)} points x every n: {report.kills} kills, {report.resumes} resumes, "
        f"{report.loads} loads, {report.corrupt_loads} corrupt, {report.double_effects} repeated side effects, "
        f"{report.recoveries_compared} double recoveries, {len(report.violations)} violations "
        f"({report.seconds:.0f}s)",
        report.ok and report.kills > 0,
    )
    for violation in report.violations[:5]:
        print(f"      {violation}")
    report = chaos.random_kills(factory, TASK, store_kind=_kind(kind), workdir=scratch, kills=kills, seed=seed)
    said.add("3 random SIGKILLs")
    lines.say(
        f"3 random SIGKILLs ({kind})",
        f"{report.kills} kills (seed {seed}) over {report.runs} runs, {report.corrupt_loads} corrupt loads, "
        f"{report.double_effects} repeated side effects, {len(report.violations)} violations "
        f"({report.seconds:.0f}s)",
        report.ok,
    )
    for violation in report.violations[:5]:
        print(f"      {violation}")


def _power_loss_run(
    kind: str,
    scratch: Path,
    *,
    durability: str = "full",
    drop: frozenset[str] = frozenset(),
    variants: int = 20,
    packing: bool = False,
) -> tuple[faults.PowerLossLog, faults.PowerLossResult]:
    root, world = scratch / "store", scratch / "world"
    root.mkdir(parents=True)
    world.mkdir()

    def url(at: Path) -> str:
        # packing: SQLite moves all but the newest record into segments after every save
        pack = "&keep_recent=1&pack_batch=2&sealed_read_from=0" if packing else ""
        return f"sqlite:///{at / 'store.db'}?durability={durability}{pack}" if kind == "sqlite" else f"file://{at}"

    open_store(url(root)).close()
    os.sync()
    log = faults.record_power_loss_run(
        agent=AGENT,
        task=TASK,
        url=url(root),
        root=root,
        world=world,
        out=scratch / "log",
        preload=faults.preload_library() if kind == "sqlite" else None,
        drop_sites=drop,
    )
    result = faults.check_power_loss(
        log, url_for=url, run_id="powerloss", dest=scratch / "image", variants=variants, seed=3
    )
    return log, result


def _power_loss(lines: _Lines) -> None:
    for kind in ("file", "sqlite"):
        scratch = _scratch()
        try:
            log, result = _power_loss_run(kind, scratch)
            lines.say(
                f"4 power loss ({kind}, full)",
                f"{result.crash_points} crash points x 21 images = {result.images} images: "
                f"{result.acked_saves_lost} acked saves lost, {result.acked_ledger_lost} acked ledger writes lost, "
                f"{result.corrupt_loads} corrupt",
                result.failures == 0,
            )
            if kind == "file":
                caught: list[str] = []
                masked: list[str] = []
                for site, what in sorted(log.sites.items()):
                    mutant = _scratch()
                    try:
                        _, bad = _power_loss_run(kind, mutant, drop=frozenset({site}), variants=2)
                    finally:
                        shutil.rmtree(mutant, ignore_errors=True)
                    (caught if bad.failures else masked).append(f"{site} ({what.split(' ')[0]})")
                lines.say(
                    "4 fsync mutation check (file)",
                    f"{len(caught)}/{len(log.sites)} fsync call sites, removed one at a time, make the check fail"
                    + (f"; masked by a later fsync in this workload: {', '.join(masked)}" if masked else ""),
                    bool(caught) and all(not site.startswith(("_write_file", "_write_ledger")) for site in masked),
                )
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    scratch = _scratch()
    try:
        _, result = _power_loss_run("sqlite", scratch, packing=True)
        lines.say(
            "4 power loss (sqlite packing, full)",
            f"{result.crash_points} crash points x 21 images = {result.images} images: "
            f"{result.acked_saves_lost} acked saves lost, {result.acked_ledger_lost} acked ledger writes lost, "
            f"{result.corrupt_loads} corrupt",
            result.failures == 0,
        )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    scratch = _scratch()
    try:
        _, result = _power_loss_run("sqlite", scratch, durability="normal")
        lines.say(
            "4 power loss (sqlite, normal)",
            f"{result.acked_saves_lost} of {result.images} images lost acked saves (the documented limit), "
            f"{result.corrupt_loads} corrupt",
            result.corrupt_loads == 0,
        )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _sample_records(scratch: Path, factory: chaos.AgentFactory) -> list[StoredRecord]:
    os.environ[chaos.WORLD_ENV] = str(scratch)
    store = open_store("memory://")
    factory(store).run(TASK, run_id="sample")
    return store.read_records("sample")


def _torn(lines: _Lines, factory: chaos.AgentFactory, flips: int, seed: int) -> None:
    scratch = _scratch()
    try:
        records = _sample_records(scratch, factory)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    expected = {good: decode("sample", records[:good]).state for good in range(1, len(records))}

    def detected(damaged: list[StoredRecord], index: int) -> bool:
        try:
            decode("sample", damaged)
            return False
        except CorruptCheckpoint:
            pass
        recovered = decode("sample", damaged, recover=True)
        return recovered.last_seq == index and recovered.state == expected[index]

    cases = caught = 0
    for index in range(1, len(records)):
        record = records[index]
        for cut in range(len(record.body)):
            damaged = [
                *records[:index],
                StoredRecord(record.seq, record.body[:cut], record.checksum),
                *records[index + 1 :],
            ]
            cases += 1
            caught += detected(damaged, index)
    lines.say(
        "5 torn records",
        f"{caught}/{cases} truncations (every record, every byte) detected, last save loads",
        caught == cases,
    )
    rng = random.Random(seed)
    caught = 0
    for _ in range(flips):
        index = rng.randrange(1, len(records))
        flipped = faults.flip_bits(records[index], rng, rng.randint(1, 8))
        caught += detected([*records[:index], flipped, *records[index + 1 :]], index)
    lines.say(
        "5 flipped bits", f"{caught}/{flips} random bit flips (seed {seed}) detected, last save loads", caught == flips
    )


def _pytest(lines: _Lines, guarantee: str, path: str) -> None:
    started = time.perf_counter()
    completed = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "", path],
        capture_output=True,
        text=True,
    )
    summary = completed.stdout.strip().splitlines()[-1] if completed.stdout.strip() else completed.stderr[-300:]
    passed = re.search(r"(\d+) passed", summary)
    lines.say(
        guarantee,
        f"{passed.group(1) if passed else 0} test cases of {path} ({summary}) in {time.perf_counter() - started:.0f}s",
        completed.returncode == 0,
    )


def _simulation(lines: _Lines, schedules: int, seed: int) -> None:
    """Seeded fault schedules of the real engine (docs/simulation.md): many on memory and SQLite,
    fewer on the servers (PostgreSQL, Redis, S3 on moto), each checked against every invariant."""
    from unbroken.testing.simulate import simulate
    from unbroken.testing.simulate.stores import store_factory

    postgres = os.environ.get(POSTGRES_URL_ENV, "postgresql://postgres@127.0.0.1:5432/test")
    backends: list[tuple[str, str, int]] = [
        ("memory", "memory", schedules),
        ("sqlite", "sqlite", schedules // 2),
        ("postgres", f"{postgres}{'&' if '?' in postgres else '?'}schema=reliability_sim", max(1, schedules // 100)),
        ("redis", "redis://127.0.0.1:6379/0?prefix=reliability-sim&durability=none", max(1, schedules // 100)),
    ]
    moto: subprocess.Popen[bytes] | None = None
    try:
        sys.path.insert(0, "tests/integration/s3")
        import s3test  # type: ignore[import-not-found]

        s3test.use_test_credentials()
        moto, endpoint = s3test.start_moto()
        bucket = s3test.new_bucket(endpoint)
        backends.append(("s3", s3test.store_url(endpoint, bucket, "sim"), max(1, schedules // 200)))
    except Exception as exc:  # no moto here: the S3 line says so
        lines.say("9 simulation on s3", f"moto could not start ({type(exc).__name__}: {exc})", False)
    try:
        for name, spec, count in backends:
            started = time.perf_counter()
            try:
                with store_factory(spec) as factory:
                    report = simulate(range(seed, seed + count), factory)
            except StoreUnavailable as exc:
                lines.say(f"9 simulation on {name}", f"store unavailable: {exc}", False)
                continue
            took = time.perf_counter() - started
            failed = ", ".join(f"seed {o.seed}: {o.violations[0]}" for o in report.failures[:3])
            lines.say(
                f"9 simulation on {name}",
                f"{report.seeds} schedules, {len(report.failures)} broke an invariant ({report.seeds / took:.1f}/s)"
                + (f"; {failed}" if failed else ""),
                report.passed,
            )
    finally:
        if moto is not None:
            moto.kill()
            moto.wait(timeout=10)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python scripts/reliability.py", description=__doc__)
    parser.add_argument("--kills", type=int, default=300, help="random SIGKILLs per store")
    parser.add_argument("--flips", type=int, default=100_000, help="random bit-flip cases")
    parser.add_argument("--seed", type=int, default=20261101)
    parser.add_argument(
        "--schedules",
        type=int,
        default=20_000,
        help="simulated fault schedules on memory (half as many on SQLite, fewer on the servers)",
    )
    parser.add_argument(
        "--stores",
        default="sqlite,sqlite-packed,file,postgres",
        help=f"comma-separated store kinds to sweep (postgres: the server of ${POSTGRES_URL_ENV}, "
        "default the local test server; one schema per run, dropped afterwards)",
    )
    args = parser.parse_args(argv)
    if not Path(AGENT.split(":")[0]).is_file():
        print(f"run this from the repository root (needs {AGENT.split(':')[0]})", file=sys.stderr)
        return 2
    factory = load_agent(AGENT).factory()
    lines = _Lines()
    steps: list[Callable[[], None]] = [
        lambda: _crash_points(lines),
        lambda: _sweeps(lines, factory, args.stores.split(","), args.kills, args.seed),
        lambda: _power_loss(lines),
        lambda: _torn(lines, factory, args.flips, args.seed),
        lambda: _pytest(lines, "6 disk faults (ENOSPC, EIO)", "tests/reliability/test_disk_faults.py"),
        lambda: _pytest(lines, "7 hostile input (fuzz, size cap)", "tests/reliability/test_hostile_input.py"),
        lambda: _pytest(lines, "8 unbroken chaos (CLI)", "tests/reliability/test_chaos_cli.py"),
        lambda: _simulation(lines, args.schedules, args.seed),
    ]
    for step in steps:
        step()
    print("reliability: " + ("FAILED" if lines.failed else "every guarantee holds"))
    return 1 if lines.failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
