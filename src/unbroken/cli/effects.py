"""Commands about the effect ledger: effects (list it), resolve (settle an unknown outcome),
gc (prune the entries of finished runs)."""

from __future__ import annotations

import re
import time
from collections.abc import Sequence

import click
from rich.markup import escape
from rich.table import Table

from .. import LedgerEntry, resolve_call
from ..errors import ConfigError, RunNotFound
from ._app import friendly_errors, main, store_option
from .runs import brief, make_console, open_run_store, when

STATUS_STYLES = {"pending": "yellow", "succeeded": "green", "failed": "red", "unknown": "bold red"}
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")


def parse_duration(text: str) -> float:
    """``30m``, ``12h``, ``7d``, ``2w``, ``45s`` -> seconds. Raises ``ConfigError`` otherwise."""
    match = _DURATION.match(text.lower())
    if match is None:
        raise ConfigError(
            f"{text!r} is not a duration; use a number followed by s, m, h, d or w (for example 30m, 12h, 7d)"
        )
    return float(match.group(1)) * _UNITS[match.group(2)]


def ledger_table(entries: Sequence[LedgerEntry], title: str | None = None, *, compact: bool = False) -> Table:
    """Ledger entries as a table: key, tool, status, attempts, created, updated, result.
    ``compact`` shortens keys and times and leaves out ``created``, to fit a narrow terminal."""
    table = Table(title=title, title_justify="left")
    time_width = 8 if compact else 19
    table.add_column("key", no_wrap=True, min_width=15 if compact else 43)
    table.add_column("tool", no_wrap=True, min_width=10)
    table.add_column("status", no_wrap=True, min_width=9)
    table.add_column("attempts", justify="right", no_wrap=True, min_width=8)
    if not compact:
        table.add_column("created", no_wrap=True, min_width=time_width)
    table.add_column("updated", no_wrap=True, min_width=time_width)
    table.add_column("result", max_width=48, min_width=8)
    for entry in entries:
        result = "-"
        if entry.result is not None:
            result = ("ERROR " if entry.result.is_error else "") + brief(entry.result.content, 60)
        status = f"[{STATUS_STYLES.get(entry.status, 'white')}]{entry.status}[/]"
        if compact:
            row = [entry.key[:14] + "…", escape(entry.tool), status, str(entry.attempts), when(entry.updated_at)[11:]]
        else:
            row = [
                entry.key,
                escape(entry.tool),
                status,
                str(entry.attempts),
                when(entry.created_at),
                when(entry.updated_at),
            ]
        table.add_row(*row, escape(result))
    return table


@main.command("effects")
@click.argument("run_id", metavar="RUN")
@store_option
@friendly_errors
def effects_command(run_id: str, store_url: str) -> None:
    """List a run's effect ledger.

    One row per idempotency key of a call to a tool that is not read-only."""
    with open_run_store(store_url) as store:
        entries = store.ledger_list(run_id)
        if not entries and not store.exists(run_id):
            raise RunNotFound(f"no run {run_id!r} in {store_url}")
    console = make_console()
    if not entries:
        console.print(f"run {escape(run_id)} has no ledger entries (no call to a tool that is not read-only yet)")
        return
    console.print(ledger_table(entries, title=f"effect ledger of {escape(run_id)}"))


@main.command("resolve")
@click.argument("run_id", metavar="RUN")
@click.argument("call_id")
@click.option("--result", "result_text", help="The call did take effect; this is what the model will be told.")
@click.option("--is-error", is_flag=True, help="With --result: the call took effect but failed.")
@click.option("--not-executed", is_flag=True, help="The call certainly did not take effect: run it on resume.")
@store_option
@friendly_errors
def resolve_command(
    run_id: str, call_id: str, result_text: str | None, is_error: bool, not_executed: bool, store_url: str
) -> None:
    """Settle a tool call whose outcome is unknown.

    Use it after checking yourself whether CALL_ID took effect. Durable when it returns;
    refused while a live process runs the run. Resume the run afterwards."""
    if (result_text is None) == (not not_executed):
        raise ConfigError("give exactly one of --result TEXT or --not-executed")
    if is_error and result_text is None:
        raise ConfigError("--is-error goes with --result TEXT (a call that took effect and failed)")
    with open_run_store(store_url) as store:
        state = resolve_call(store, run_id, call_id, result=result_text, not_executed=not_executed, is_error=is_error)
    call = next(c for c in state.pending_calls if c.id == call_id)
    if not_executed:
        settled = "did not take effect; it will run when the run resumes"
    else:
        settled = "took effect" + (" and failed" if is_error else "") + "; the model will be told the given result"
    console = make_console()
    console.print(f"settled call {escape(call_id)} ({escape(call.name)}) of run {escape(run_id)}: {settled}.")
    console.print(f"next: unbroken resume {escape(run_id)} --agent module:attr")


@main.command("gc")
@click.option("--older-than", "older_than", required=True, help="Age, e.g. 30m, 12h, 7d, 2w.")
@store_option
@friendly_errors
def gc_command(older_than: str, store_url: str) -> None:
    """Prune old ledger entries of finished runs.

    Deletes the ledger entries of finished runs last updated longer ago than --older-than.
    Entries of a run that is still live (in progress or paused) are never touched."""
    seconds = parse_duration(older_than)
    cutoff = time.time() - seconds
    with open_run_store(store_url) as store:
        pruned = store.ledger_gc(cutoff)
    noun = "entry" if pruned == 1 else "entries"
    make_console().print(f"pruned {pruned} ledger {noun} of finished runs last updated before {when(cutoff)}")
