"""``unbroken simulate``: play seeded fault schedules of the real engine and check invariants.

Renders what ``unbroken.testing.simulate`` finds; the simulation itself lives there."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import click

from ._app import friendly_errors, main

if TYPE_CHECKING:
    from ..testing.simulate import Outcome


@main.command()
@click.option("--seeds", default=200, show_default=True, help="How many seeds to play (from --seed on).")
@click.option("--seed", "first", default=0, show_default=True, help="The first seed (with --replay: the one seed).")
@click.option("--replay", is_flag=True, help="Play the one seed --seed and print its schedule and what happened.")
@click.option(
    "--schedule",
    "schedule_file",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    default=None,
    help="With --replay: play this schedule (text, one action a line, as printed) on --seed's world.",
)
@click.option(
    "--backend",
    default="memory",
    show_default=True,
    help="memory, forgetful (loses data as a cache-like server may), encrypted (memory, encrypted at rest), "
    "sqlite, a store URL (postgresql://..., "
    "redis://..., s3://...), or module:factory / file.py:factory returning a fresh store for each schedule.",
)
@click.option(
    "--mutations", is_flag=True, help="Print the mutation table: each defence switched off, seeds to find it."
)
@click.option("--no-shrink", is_flag=True, help="Report failing schedules as drawn, without shrinking them.")
@friendly_errors
def simulate(
    seeds: int, first: int, replay: bool, schedule_file: Path | None, backend: str, mutations: bool, no_shrink: bool
) -> None:
    """Play seeded schedules (process kills, freezes, clock steps, store errors, lost replies,
    delays, torn writes) over the real engine and store code, and check after each one that no
    side effect ran twice, no acknowledged save was lost, every call got its own answer and
    no process that lost its lease acted. A failure prints its seed and a shrunk schedule;
    exits 1 if any seed failed. See docs/simulation.md."""
    from ..testing import simulate as sim
    from ..testing.simulate.stores import store_factory

    with store_factory(backend) as factory:
        if mutations:
            _mutation_table(seeds, first)
            return
        if replay:
            scenario, actions = sim.scenario_and_schedule(first)
            if schedule_file is not None:
                actions = sim.from_text(schedule_file.read_text(encoding="utf-8"))
            outcome = sim.play(scenario, actions, factory, seed=first)
            hosts = ", ".join(scenario.hosts)
            click.echo(f"# seed {first}: {len(scenario.hosts)} processes on {hosts}, {scenario.runs} run(s)")
            click.echo(sim.to_text(actions))
            click.echo("# what happened:")
            for line in outcome.trace:
                click.echo(f"#   {line}")
            _say_violations(outcome)
            for violation in outcome.after_loss:
                click.echo(f"  after the store lost data: {violation}")
            sys.exit(1 if outcome.failed else 0)
        started = time.perf_counter()
        report = sim.simulate(range(first, first + seeds), factory, shrink_failures=not no_shrink)
        took = time.perf_counter() - started
        for outcome in report.failures:
            click.echo(f"seed {outcome.seed} FAILED; replay: unbroken simulate --replay --seed {outcome.seed}")
            _say_violations(outcome)
            click.echo("  schedule (shrunk):" if not no_shrink else "  schedule:")
            for line in sim.to_text(outcome.actions).splitlines():
                click.echo(f"    {line}")
        if report.losses:
            costs: dict[str, int] = {}
            for outcome in report.losses:
                for invariant in sorted({violation.invariant for violation in outcome.after_loss}):
                    costs[invariant] = costs.get(invariant, 0) + 1
            click.echo(f"after the store lost data (as {backend} may), in {len(report.losses)} schedules:")
            for invariant, count in sorted(costs.items()):
                click.echo(f"  {invariant}: {count} (e.g. seed {_first(report.losses, invariant)})")
        click.echo(
            f"{report.seeds} schedules on {backend}, {len(report.failures)} failed, "
            f"{took:.1f}s ({report.seeds / took if took else 0:.0f} schedules/s)"
        )
        sys.exit(1 if report.failures else 0)


def _first(outcomes: list[Outcome], invariant: str) -> int:
    return next(o.seed for o in outcomes if any(v.invariant == invariant for v in o.after_loss))


def _say_violations(outcome: object) -> None:
    for violation in getattr(outcome, "violations", []):
        click.echo(f"  {violation}")


def _mutation_table(seeds: int, first: int) -> None:
    from ..testing.simulate.table import mutation_table

    for row in mutation_table(seeds):
        if row.found is None:
            click.echo(f"{row.name:<36} not found in {row.tried} seeds")
        else:
            kinds = sorted({violation.invariant for violation in row.found.violations})
            click.echo(f"{row.name:<36} found at seed {row.found.seed} ({row.tried} tried): {', '.join(kinds)}")
