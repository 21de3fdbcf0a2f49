"""``unbroken watch RUN``: follow a run from another process as it goes (``unbroken.watching``)."""

from __future__ import annotations

from collections.abc import Iterator

import click
from rich.console import Group
from rich.live import Live
from rich.markup import escape
from rich.table import Table

from ..ops import open_existing_store as open_run_store
from ..state import LedgerEntry, SaveInfo
from ..watching import Update, follow, wait_until_started
from ._app import friendly_errors, main, store_option
from ._render import make_console, phase_text, when

SHOWN = 15  # save points in the live table


def _line(run_id: str, info: SaveInfo, calls: list[str]) -> str:
    asked = f"  calls {escape(', '.join(calls))}" if calls else ""
    return (
        f"{when(info.at, precise=True)}  {escape(run_id)}  save {info.seq:>4}  {escape(info.label):<20} "
        f"{phase_text(info.phase)}  turns {info.turns}  tokens {info.tokens_used:,}{asked}"
    )


def _effect_line(entry: LedgerEntry, status: str) -> str:
    return f"  effect {escape(entry.tool)} ({escape(entry.call_id)}): {status}"


def events(update: Update, seen: set[str]) -> list[tuple[float, int, str]]:
    """An update's save points and ledger changes as (time, order, line), in the order they
    happened: a call's ``pending`` (its intent, at its creation) comes after the save point that
    asked for it and before the one that holds its result, even when one poll saw both. ``seen``:
    the keys already shown (updated here)."""
    lines: list[tuple[float, int, str]] = []  # (time, 0 for a save point and its notes / 1 for the ledger, line)
    for info in update.saves:
        lines.append((info.at, 0, _line(update.run_id, info, update.calls.get(info.seq, []))))
        lines += [(info.at, 0, f"  {escape(note)}") for note in update.notes.get(info.seq, ())]
    for entry in update.effects:
        if entry.key not in seen and entry.status != "pending":  # its intent was not shown: it came first
            lines.append((entry.created_at, 1, _effect_line(entry, "pending")))
        seen.add(entry.key)
        lines.append((entry.updated_at, 1, _effect_line(entry, entry.status)))
    return sorted(lines, key=lambda line: (line[0], line[1]))  # stable: a save's notes stay under it


def _panel(run_id: str, recent: list[tuple[SaveInfo, list[str]]], update: Update, notes: dict[int, list[str]]) -> Group:
    table = Table(title=f"run {escape(run_id)}", title_justify="left")
    for name in ("seq", "label", "phase", "turns", "tokens", "calls", "time"):
        table.add_column(name)
    for info, calls in recent[-SHOWN:]:
        table.add_row(
            str(info.seq),
            escape(info.label),
            phase_text(info.phase),
            str(info.turns),
            f"{info.tokens_used:,}",
            escape(", ".join(calls)),
            when(info.at, precise=True),
        )
    holder = escape(update.holder) if update.holder else "nobody (not running)"
    shown = {info.seq for info, _calls in recent[-SHOWN:]}
    lines = [f"save {seq}: {escape(note)}" for seq in sorted(notes) if seq in shown for note in notes[seq]]
    return Group(table, *lines, f"phase {phase_text(update.phase)}; lease held by {holder}")


@main.command("watch")
@click.argument("run_id", metavar="RUN")
@click.option("--interval", type=click.FloatRange(0.05), default=0.5, show_default=True, help="Seconds between polls.")
@click.option("--timeout", type=click.FloatRange(0), default=None, help="Stop watching after this many seconds.")
@click.option(
    "--wait",
    "wait_for",
    type=click.FloatRange(0),
    default=None,
    is_flag=False,
    flag_value=60.0,
    help="Wait up to SECONDS (default 60) for the run to start, if it has not yet.",
)
@store_option
@friendly_errors
def watch_command(run_id: str, interval: float, timeout: float | None, wait_for: float | None, store_url: str) -> None:
    """Follow RUN while another process runs it: every save point and side effect as it happens.

    Read-only: it never takes the run's lease, so it works next to a live worker. Each save
    point names the tools its turn called; ledger changes are printed where they happened.
    Ends when the run finishes or stops for a person (paused, awaiting approval), or after
    --timeout. --wait [SECONDS] first waits for a run that has not started yet."""
    console = make_console()
    with open_run_store(store_url) as store:
        if wait_for is not None:
            wait_until_started(store, run_id, timeout=wait_for, interval=interval)
        updates: Iterator[Update] = follow(store, run_id, interval=interval, timeout=timeout)
        last: Update | None = None
        if console.is_terminal:
            recent: list[tuple[SaveInfo, list[str]]] = []
            notes: dict[int, list[str]] = {}
            with Live(console=console, refresh_per_second=8) as live:
                for last in updates:
                    recent += [(info, last.calls.get(info.seq, [])) for info in last.saves]
                    notes.update(last.notes)
                    live.update(_panel(run_id, recent, last, notes))
        else:
            seen: set[str] = set()
            for last in updates:
                for _at, _order, line in events(last, seen):
                    console.print(line, highlight=False, soft_wrap=True)
    if last is not None:
        console.print(f"run {escape(run_id)} is {phase_text(last.phase)}")
