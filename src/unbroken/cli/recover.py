"""``unbroken recover RUN [--to SAVE]``: continue a damaged run from an intact save point."""

from __future__ import annotations

import click
from rich.markup import escape

from ..ops import open_existing_store as open_run_store
from ..ops import recover
from ._app import friendly_errors, main, store_option
from ._render import make_console, print_hint, progress, resume_hint


@main.command("recover")
@click.argument("run_id", metavar="RUN")
@click.option("--to", "to", type=int, default=None, help="Save point to continue from (default: the last intact one).")
@store_option
@friendly_errors
def recover_command(run_id: str, to: int | None, store_url: str) -> None:
    """Continue a damaged run from an intact save point.

    The run's records, damaged ones included, are kept unchanged in the run RUN.damaged-N;
    the effect ledger is kept. The model is told which side effects already happened after
    the save point, so it does not repeat them. Refused while a live process runs the run."""
    with open_run_store(store_url) as store, progress(f"recovering run {run_id}"):
        done = recover(store, run_id, to=to)
    console = make_console()
    if done.released:
        where = f"save point {done.seq}" if done.seq else "its task (the store kept no save point)"
        console.print(f"run {escape(run_id)} was parked as lost and is released: workers take it again, from {where}")
        return
    console.print(
        f"run {escape(run_id)} continues from save point {done.recovered_from} (now save {done.seq}); "
        f"the original records are kept in run {escape(done.kept_aside)}"
    )
    if done.told:
        console.print(f"the model will be told about {len(done.told)} side effect(s) made after that point")
    print_hint(console, f"resume it with: {escape(resume_hint(run_id))} (or Agent.run)")
