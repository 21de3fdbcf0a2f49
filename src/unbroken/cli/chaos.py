"""``unbroken chaos``: the crash sweep of the test suite, run on the user's own agent."""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from pathlib import Path

import click

from ._app import friendly_errors, main


@main.command()
@click.option(
    "--agent", "agent_spec", required=True, help="module:attr or file.py:attr: an Agent, or f(store) -> Agent."
)
@click.option("--task", required=True, help="The task to run (the agent's model must be scripted or recorded).")
@click.option("--kills", default=20, show_default=True, help="Random SIGKILLs from outside, on top of the sweep.")
@click.option("--seed", default=0, show_default=True, help="Seed of the random kills.")
@click.option("--store-kind", type=click.Choice(["sqlite", "file", "postgres"]), default="sqlite", show_default=True)
@click.option(
    "--store-url",
    default=None,
    help="With --store-kind postgres: the server (postgresql://user@host:port/db); each run gets its own "
    "schema, dropped at the end. Default: $UNBROKEN_TEST_POSTGRES_URL, else the local server.",
)
@click.option("--per-point", default=3, show_default=True, help="Values of n tried per crash point (0: all).")
@click.option("--workdir", type=click.Path(file_okay=False, path_type=Path), default=None, help="Where runs go.")
@friendly_errors
def chaos(
    agent_spec: str,
    task: str,
    kills: int,
    seed: int,
    store_kind: str,
    store_url: str | None,
    per_point: int,
    workdir: Path | None,
) -> None:
    """Kill your agent at every crash point and at random instants, resume it, check the invariants.

    Each run happens in a fresh store in a child process; $UNBROKEN_CHAOS_DIR is the run's own
    directory (put fake services there). Exits 1 if any invariant is broken: put it in CI."""
    from rich.console import Console
    from rich.table import Table

    from .. import chaos as harness
    from ..chaos._config import POSTGRES_URL_ENV, drop_stores
    from ..errors import StoreUnavailable

    if store_url:
        if store_kind != "postgres":
            raise click.UsageError("--store-url is for --store-kind postgres")
        os.environ[POSTGRES_URL_ENV] = store_url  # read by the postgres store kind when it names each run's schema
    factory = harness.load_factory(agent_spec)
    console = Console()
    with tempfile.TemporaryDirectory(prefix="unbroken-chaos-", dir=workdir) as scratch:
        root = Path(scratch)
        try:
            report = harness.sweep(
                factory, task, store_kind=store_kind, workdir=root / "sweep", per_label=per_point or None
            )
            if kills > 0:
                report.merge(
                    harness.random_kills(
                        factory, task, store_kind=store_kind, workdir=root / "random", kills=kills, seed=seed
                    )
                )
        finally:
            with contextlib.suppress(StoreUnavailable):
                for part in ("sweep", "random"):
                    drop_stores(store_kind, root / part)
    table = Table(title=f"unbroken chaos: {agent_spec} on {store_kind}")
    table.add_column("crash point", no_wrap=True)
    for column in ("hits", "runs", "kills", "resumes", "unknown", "violations"):
        table.add_column(column, justify="right")
    for stats in sorted(report.points.values(), key=lambda s: s.label):
        table.add_row(
            stats.label,
            str(stats.hits),
            str(stats.runs),
            str(stats.kills),
            str(stats.resumes),
            str(stats.unknown_results),
            f"[red]{stats.violations}[/red]" if stats.violations else "0",
        )
    console.print(table)
    console.print(
        f"{report.runs} runs, {report.kills} kills, {report.resumes} resumes, {report.loads} loads "
        f"({report.corrupt_loads} corrupt), {report.recoveries_compared} double recoveries compared, "
        f"{report.double_effects} side effects repeated, {len(report.violations)} violations "
        f"in {report.seconds:.1f}s"
    )
    for violation in report.violations[:50]:
        console.print(f"[red]VIOLATION[/red] {violation.target}: {violation.invariant}: {violation.detail}")
    if report.violations:
        sys.exit(1)
