"""``unbroken fork RUN --at SAVE --as NEW`` and ``unbroken rewind RUN --to SAVE``: a run that
shares another's history up to a save point (``unbroken.fork``)."""

from __future__ import annotations

import click
from rich.console import Console
from rich.markup import escape

from ..fork import Fork
from ..ops import fork, rewind
from ..ops import open_existing_store as open_run_store
from ._app import friendly_errors, main, store_option
from ._render import ledger_table, make_console, print_hint, resume_hint


def _print_fork(console: Console, made: Fork) -> None:
    if made.settled:
        console.print(f"{len(made.settled)} effect(s) up to save {made.at} are settled in it (never re-run)")
    if made.effects_after:
        console.print(
            f"[yellow]run {escape(made.forked_from)} made {len(made.effects_after)} side effect(s) after save "
            f"{made.at}; they happened, and this branch does not know about them:[/]"
        )
        console.print(ledger_table(made.effects_after))
    else:
        console.print(f"run {escape(made.forked_from)} recorded no side effect after save {made.at}")
    print_hint(console, f"continue it with: {escape(resume_hint(made.run_id))} (or Agent.run / Agent.send)")


@main.command("fork")
@click.argument("run_id", metavar="RUN")
@click.option("--at", "at", type=int, required=True, help="The save point to branch from (see `unbroken history`).")
@click.option("--as", "new_run_id", default=None, help="The new run's id (default: RUN.fork-SAVE).")
@store_option
@friendly_errors
def fork_command(run_id: str, at: int, new_run_id: str | None, store_url: str) -> None:
    """Start a new run that shares RUN's history up to save point SAVE.

    RUN is not changed. Calls the new run inherits are settled, never re-run; the side effects
    RUN made after SAVE are listed before you continue the new run."""
    with open_run_store(store_url) as store:
        made = fork(store, run_id, at=at, new_run_id=new_run_id)
    console = make_console()
    console.print(f"run {escape(made.run_id)} forked from {escape(run_id)} at save {at}")
    _print_fork(console, made)


@main.command("rewind")
@click.argument("run_id", metavar="RUN")
@click.option("--to", "to", type=int, required=True, help="The save point to go back to (see `unbroken history`).")
@store_option
@friendly_errors
def rewind_command(run_id: str, to: int, store_url: str) -> None:
    """Take RUN back to save point SAVE, in place.

    The run as it is now is kept as the run RUN.branch-HEAD (listed by `unbroken runs`);
    RUN then continues from SAVE. Refused while a live process runs it."""
    with open_run_store(store_url) as store:
        made = rewind(store, run_id, to=to)
    console = make_console()
    console.print(
        f"run {escape(run_id)} is back at save {to}; its previous branch is kept as run {escape(str(made.kept_as))}"
    )
    _print_fork(console, made)
