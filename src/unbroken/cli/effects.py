"""Commands about the effect ledger: effects (list it), resolve (settle an unknown outcome),
gc (prune the entries of finished runs)."""

from __future__ import annotations

import re
import time

import click
from rich.markup import escape

from ..errors import ConfigError
from ..ops import DAY, LEDGER_PAGE, Retention, apply_retention, ledger_of, open_existing_store, resolve_call
from ._app import friendly_errors, main, store_option
from ._render import ledger_table, make_console, next_command, print_hint, progress, resume_hint, when

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


@main.command("effects")
@click.argument("run_id", metavar="RUN")
@click.option(
    "--last",
    type=click.IntRange(1),
    default=LEDGER_PAGE,
    show_default=True,
    help="Only the newest N entries.",
)
@click.option("--all", "show_all", is_flag=True, help="Every entry of the run.")
@store_option
@friendly_errors
def effects_command(run_id: str, last: int, show_all: bool, store_url: str) -> None:
    """List a run's effect ledger, oldest first.

    One row per idempotency key of a call to a tool that is not read-only. Shows the newest 100
    by default (--last N, --all for every one). Cost: SQLite and PostgreSQL read only those
    entries (an index by creation time); the other stores read every entry of the run."""
    with open_existing_store(store_url) as store:
        ledger = ledger_of(store, run_id, last=None if show_all else last)
    entries = ledger.entries
    console = make_console()
    if not entries and ledger.run_finished:
        print_hint(
            console,
            f"run {escape(run_id)} is finished and has no ledger entries left: "
            f"{escape(next_command('gc', '--older-than', '7d'))} collects the entries of finished runs "
            "(or the run never called a tool that is not read-only)",
        )
        return
    if not entries:
        console.print(f"run {escape(run_id)} has no ledger entries (no call to a tool that is not read-only yet)")
        return
    console.print(ledger_table(entries, title=f"effect ledger of {escape(run_id)}"))
    if ledger.earlier:
        console.print(f"the newest {len(entries)} entries; older ones: --last N or --all")


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
    with open_existing_store(store_url) as store:
        state = resolve_call(store, run_id, call_id, result=result_text, not_executed=not_executed, is_error=is_error)
    call = next(c for c in state.pending_calls if c.id == call_id)
    if not_executed:
        settled = "did not take effect; it will run when the run resumes"
    else:
        settled = "took effect" + (" and failed" if is_error else "") + "; the model will be told the given result"
    console = make_console()
    console.print(f"settled call {escape(call_id)} ({escape(call.name)}) of run {escape(run_id)}: {settled}.")
    print_hint(console, f"next: {escape(resume_hint(run_id))}")


@main.command("gc")
@click.option("--older-than", "older_than", default=None, help="Prune ledger entries older than this: 30m, 12h, 7d.")
@click.option("--runs-older-than", "runs_older_than", default=None, help="Remove finished runs older than this: 30d.")
@click.option("--keep-ledger", "keep_ledger", default=None, help="With --runs-older-than: keep ledgers this long.")
@click.option("--erase", "erase_runs", is_flag=True, help="With --runs-older-than: erase (scrub) rather than delete.")
@click.option("--limit", type=click.IntRange(1), default=100, show_default=True, help="Runs handled by this call.")
@store_option
@friendly_errors
def gc_command(
    older_than: str | None,
    runs_older_than: str | None,
    keep_ledger: str | None,
    erase_runs: bool,
    limit: int,
    store_url: str,
) -> None:
    """Prune old ledger entries of finished runs, and apply a retention policy to finished runs.

    --older-than: delete the ledger entries of finished runs last updated longer ago. Entries
    of a run that is still live (in progress or paused) are never touched.

    --runs-older-than: finished runs last saved longer ago lose their history; their effect
    ledger goes with them, or is kept --keep-ledger long for audit (the run is emptied, listed
    as "retained", then removed). At most --limit runs a call: repeat until it says done."""
    if older_than is None and runs_older_than is None:
        raise ConfigError("say what to collect: --older-than AGE (ledger entries) and/or --runs-older-than AGE (runs)")
    console = make_console()
    with open_existing_store(store_url) as store:
        if older_than is not None:
            cutoff = time.time() - parse_duration(older_than)
            with progress("collecting ledger entries of finished runs"):
                pruned = store.ledger_gc(cutoff)
            noun = "entry" if pruned == 1 else "entries"
            console.print(f"pruned {pruned} ledger {noun} of finished runs last updated before {when(cutoff)}")
        if runs_older_than is not None:
            policy = Retention(
                runs_days=parse_duration(runs_older_than) / DAY,
                ledger_days=None if keep_ledger is None else parse_duration(keep_ledger) / DAY,
                erase=erase_runs,
            )
            with progress("applying the retention policy"):
                report = apply_retention(store, policy, limit=limit)
            console.print(
                f"retention: removed {len(report.removed)} run(s), emptied {len(report.emptied)} "
                f"(ledger kept for audit)" + ("; more left: run it again" if report.more else "; done")
            )
            if report.scrubbed:
                console.print(f"store: {escape(report.scrubbed)}")
