"""``unbroken erase``: remove a run and every copy of its data, for good."""

from __future__ import annotations

import click
from rich.markup import escape

from .. import ops
from ._app import friendly_errors, main, store_option
from ._render import make_console


@main.command("erase")
@click.argument("run_id", metavar="RUN")
@click.option("--with-forks", is_flag=True, help="Also erase the runs forked from RUN and its rewind branches.")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@store_option
@friendly_errors
def erase_command(run_id: str, with_forks: bool, yes: bool, store_url: str) -> None:
    """Erase RUN for good: its save points and snapshots, its effect ledger, its queue entry,
    the copies `recover` kept aside (RUN.damaged-N) and, with --with-forks, its forks and rewind
    branches. Says what it removed and which forks still hold a copy of its history."""
    if not yes:
        what = "and its forks and rewind branches " if with_forks else ""
        click.confirm(f"Erase run {run_id} {what}for good? This cannot be undone", abort=True)
    console = make_console()
    with ops.open_existing_store(store_url) as store:
        done = ops.erase(store, run_id, with_forks=with_forks)
    runs = ", ".join(escape(run) for run in done.removed)
    noun = "entry" if done.ledger_entries == 1 else "entries"
    console.print(f"erased {len(done.removed)} run(s): {runs}; {done.ledger_entries} effect-ledger {noun}")
    console.print(f"store: {escape(done.scrubbed or 'deleted (this store does nothing more to deleted bytes)')}")
    if done.forks_left:
        left = ", ".join(escape(run) for run in done.forks_left)
        console.print(
            f"[yellow]kept:[/] {left} (forked from it: each holds a copy of its history up to the fork; "
            "--with-forks erases them too)"
        )
