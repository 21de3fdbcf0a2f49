"""``unbroken chaos``: kill the user's own agent everywhere, resume it, check the invariants.

Renders what ``unbroken.testing.chaos`` finds; the sweep itself lives there."""

from __future__ import annotations

import contextlib
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import click

from ._app import friendly_errors, main

if TYPE_CHECKING:
    from rich.console import Console

    from ..testing.chaos import ChaosReport, Violation


_SERVER_URLS = {"postgres": "postgresql://...", "redis": "redis://HOST:6379/0", "s3": "s3://BUCKET/PREFIX"}


@main.command()
@click.option(
    "--agent",
    "agent_spec",
    required=True,
    help="module:attr or file.py:attr: an Agent, or a function returning one (taking the store or nothing).",
)
@click.option("--task", required=True, help="The task to run (the agent's model must be scripted or recorded).")
@click.option(
    "--kills", default=20, show_default=True, help="Random SIGKILLs from outside per driver, on top of the sweep."
)
@click.option("--seed", default=0, show_default=True, help="Seed of the random kills.")
@click.option(
    "--driver",
    type=click.Choice(["sync", "async", "both"]),
    default="both",
    show_default=True,
    help="Drive each run with Agent.run (sync), Agent.arun (async), or sweep once with each.",
)
@click.option(
    "--check",
    "check_spec",
    default=None,
    metavar="MODULE:FUNCTION",
    help="Your check (module:function or file.py:function), given each finished run's directory (also in "
    "$UNBROKEN_CHAOS_DIR); it returns the problems it found as a list of strings.",
)
@click.option("--keep", is_flag=True, help="Keep every run's directory (and store) and print where.")
@click.option("--strict", is_flag=True, help="Exit 1 on warnings too (repeats chaos cannot prove were side effects).")
@click.option(
    "--point",
    "points",
    multiple=True,
    metavar="LABEL",
    help="Only kill at these crash points: LABEL, or LABEL:N for its N-th hit only (repeatable).",
)
@click.option(
    "--store-kind",
    type=click.Choice(["sqlite", "file", *_SERVER_URLS]),
    default="sqlite",
    show_default=True,
)
@click.option(
    "--store-url",
    default=None,
    help="Required with --store-kind postgres, redis or s3 (postgresql://user@host:port/db?schema=NAME, "
    "redis://host:6379/0?prefix=NAME, s3://bucket/prefix?endpoint=URL). Every run of the sweep is saved there "
    "under its own run id and deleted at the end.",
)
@click.option("--per-point", default=3, show_default=True, help="Values of n tried per crash point (0: all).")
@click.option("--workdir", type=click.Path(file_okay=False, path_type=Path), default=None, help="Where runs go.")
@friendly_errors
def chaos(
    agent_spec: str,
    task: str,
    kills: int,
    seed: int,
    driver: str,
    check_spec: str | None,
    keep: bool,
    strict: bool,
    points: tuple[str, ...],
    store_kind: str,
    store_url: str | None,
    per_point: int,
    workdir: Path | None,
) -> None:
    """Kill your agent at every crash point and at random instants, resume it, check the invariants.

    Each run happens in a fresh store in a child process; $UNBROKEN_CHAOS_DIR is the run's own
    directory (put fake services there). Every execution of every tool is journaled: chaos lists,
    per tool, the calls executed more than once and exits 1 on a repeated side effect, on any
    broken invariant and on any problem your --check finds: put it in CI."""
    from ..errors import StoreUnavailable
    from ..testing import chaos as harness
    from ._render import make_console

    if store_kind in _SERVER_URLS:
        if not store_url:
            raise click.UsageError(f"--store-kind {store_kind} needs --store-url {_SERVER_URLS[store_kind]}")
        kind: str | harness.StoreKind = harness.server_kind(store_kind, store_url)
    elif store_url:
        raise click.UsageError("--store-url is for --store-kind postgres, redis or s3")
    else:
        kind = store_kind
    factory = harness.load_factory(agent_spec)
    check = harness.load_check(check_spec) if check_spec else None
    drivers = list(harness.DRIVERS) if driver == "both" else [driver]
    if workdir is not None:
        workdir.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="unbroken-chaos-", dir=workdir))
    report: ChaosReport | None = None
    try:
        for name in drivers:
            part = harness.sweep(
                factory,
                task,
                workdir=root / name / "sweep",
                per_label=per_point or None,
                labels=list(points) or None,
                store_kind=kind,
                driver=name,
                check=check,
                check_spec=check_spec or "",
                keep=keep,
            )
            if kills > 0:
                part.merge(
                    harness.random_kills(
                        factory,
                        task,
                        workdir=root / name / "random",
                        kills=kills,
                        seed=seed,
                        store_kind=kind,
                        driver=name,
                        check=check,
                        check_spec=check_spec or "",
                        keep=keep,
                    )
                )
            if report is None:
                report = part
            else:
                report.merge(part)
    finally:
        if not keep:
            with contextlib.suppress(StoreUnavailable):
                for name in drivers:
                    for part_name in ("sweep", "random"):
                        harness.drop_stores(kind, root / name / part_name)
            import shutil

            shutil.rmtree(root, ignore_errors=True)
    assert report is not None
    console = make_console()  # in a CI log, wide enough that no column header is cut
    _render(console, report, f"{agent_spec} on {store_kind}, driver {driver}")
    if keep:
        console.print(f"kept: {root}")
    if report.violations or (strict and report.warnings):
        sys.exit(1)


def _render(console: Console, report: ChaosReport, title: str) -> None:
    from rich.table import Table

    points = Table(title=f"unbroken chaos: {title}")
    points.add_column("crash point", no_wrap=True)
    for column in ("hits", "runs", "kills", "resumes", "unknown", "violations"):
        points.add_column(column, justify="right", no_wrap=True)
    for stats in sorted(report.points.values(), key=lambda s: s.label):
        points.add_row(
            stats.label,
            str(stats.hits),
            str(stats.runs),
            str(stats.kills),
            str(stats.resumes),
            str(stats.unknown_results),
            f"[red]{stats.violations}[/red]" if stats.violations else "0",
        )
    console.print(points)
    tools = Table(title="tool executions (every process of the sweep)")
    tools.add_column("tool", no_wrap=True)
    tools.add_column("declared", no_wrap=True)
    for column in ("calls", "run more than once", "most runs of one call"):
        tools.add_column(column, justify="right", no_wrap=True)
    for per_tool in sorted(report.tools.values(), key=lambda t: t.tool):
        tools.add_row(
            per_tool.tool, per_tool.effect, str(per_tool.calls), str(len(per_tool.repeated)), str(per_tool.most)
        )
    console.print(tools)
    console.print(
        f"{report.runs} runs, {report.kills} kills, {report.resumes} resumes, {report.loads} loads "
        f"({report.corrupt_loads} corrupt), {report.recoveries_compared} double recoveries compared, "
        f"{report.checks} user checks, {report.capped_results} calls not run again (crash loop), "
        f"{report.double_effects} side effects repeated, "
        f"{len(report.warnings)} warnings, {len(report.violations)} violations in {report.seconds:.1f}s"
    )
    for violation in report.violations[:50]:
        console.print(f"[red]VIOLATION[/red] {violation.target}: {violation.invariant}: {violation.detail}")
    for warning in _first_per_rule(report.warnings):
        console.print(f"[yellow]WARNING[/yellow] {warning.target}: {warning.invariant}: {warning.detail}")


def _first_per_rule(warnings: list[Violation]) -> list[Violation]:
    """One warning per (rule, tool) pair, with how many runs showed it: the same evidence
    repeated in every run says nothing new."""
    seen: dict[tuple[str, str], list[Violation]] = {}
    for warning in warnings:
        seen.setdefault((warning.invariant, warning.detail.split(" ", 1)[0]), []).append(warning)
    shown = []
    for same in seen.values():
        first = same[0]
        more = f" (and in {len(same) - 1} more runs)" if len(same) > 1 else ""
        shown.append(type(first)(first.target, first.invariant, first.detail + more))
    return shown
