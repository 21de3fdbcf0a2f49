"""``unbroken watch RUN``: follow a run from another process as it goes (``unbroken.watching``)."""

from __future__ import annotations

from collections.abc import Iterator

import click
from rich.console import Group
from rich.live import Live
from rich.markup import escape
from rich.table import Table

from ..ops import open_existing_store as open_run_store
from ..state import SaveInfo
from ..watching import Update, follow
from ._app import friendly_errors, main, store_option
from ._render import make_console, phase_text, when

SHOWN = 15  # save points in the live table


def _line(run_id: str, info: SaveInfo) -> str:
    return (
        f"{when(info.at, precise=True)}  {escape(run_id)}  save {info.seq:>4}  {escape(info.label):<20} "
        f"{phase_text(info.phase)}  turns {info.turns}  tokens {info.tokens_used:,}"
    )


def _panel(run_id: str, recent: list[SaveInfo], update: Update, notes: dict[int, list[str]]) -> Group:
    table = Table(title=f"run {escape(run_id)}", title_justify="left")
    for name in ("seq", "label", "phase", "turns", "tokens", "time"):
        table.add_column(name)
    for info in recent[-SHOWN:]:
        table.add_row(
            str(info.seq),
            escape(info.label),
            phase_text(info.phase),
            str(info.turns),
            f"{info.tokens_used:,}",
            when(info.at, precise=True),
        )
    holder = escape(update.holder) if update.holder else "nobody (not running)"
    shown = {info.seq for info in recent[-SHOWN:]}
    lines = [f"save {seq}: {escape(note)}" for seq in sorted(notes) if seq in shown for note in notes[seq]]
    return Group(table, *lines, f"phase {phase_text(update.phase)}; lease held by {holder}")


@main.command("watch")
@click.argument("run_id", metavar="RUN")
@click.option("--interval", type=click.FloatRange(0.05), default=0.5, show_default=True, help="Seconds between polls.")
@click.option("--timeout", type=click.FloatRange(0), default=None, help="Stop watching after this many seconds.")
@store_option
@friendly_errors
def watch_command(run_id: str, interval: float, timeout: float | None, store_url: str) -> None:
    """Follow RUN while another process runs it: every save point and side effect as it happens.

    Read-only: it never takes the run's lease, so it works next to a live worker. Ends when the
    run finishes or stops for a person (paused, awaiting approval), or after --timeout."""
    console = make_console()
    with open_run_store(store_url) as store:
        updates: Iterator[Update] = follow(store, run_id, interval=interval, timeout=timeout)
        last: Update | None = None
        if console.is_terminal:
            recent: list[SaveInfo] = []
            notes: dict[int, list[str]] = {}
            with Live(console=console, refresh_per_second=8) as live:
                for last in updates:
                    recent += last.saves
                    notes.update(last.notes)
                    live.update(_panel(run_id, recent, last, notes))
        else:
            for last in updates:
                for info in last.saves:
                    console.print(_line(run_id, info), highlight=False)
                    for note in last.notes.get(info.seq, ()):
                        console.print(f"  {escape(note)}", highlight=False)
                for entry in last.effects:
                    console.print(f"  effect {escape(entry.tool)} ({escape(entry.call_id)}): {entry.status}")
    if last is not None:
        console.print(f"run {escape(run_id)} is {phase_text(last.phase)}")
