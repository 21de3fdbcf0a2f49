"""Commands about stored runs: runs, show, history, export, import, migrate. Each asks ``ops``
and hands what it got to ``_render``.

Read-only commands never create a store: a SQLite file or store directory that does not exist
is reported as such instead of being created empty.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click
from rich.markup import escape

from .. import SCHEMA_VERSION, ops
from ..errors import ConfigError, CorruptCheckpoint, IncompatibleSchema, LeaseHeld
from ..stores import open_store
from ._app import friendly_errors, main, store_option
from ._render import history_table, make_console, migration_table, print_queued, print_run, runs_table


@main.command("runs")
@store_option
@friendly_errors
def runs_command(store_url: str) -> None:
    """List the runs in the store, most recently updated first; queued runs last."""
    with ops.open_existing_store(store_url) as store:
        rows = ops.list_all_runs(store)
    console = make_console()
    if not rows:
        console.print(f"no runs in {escape(store_url)}")
        return
    console.print(runs_table(rows, title=f"runs in {escape(store_url)}"))


@main.command("show")
@click.argument("run_id", metavar="RUN")
@click.option(
    "--messages",
    "message_count",
    type=click.IntRange(0),
    default=6,
    show_default=True,
    help="How many of the last messages.",
)
@store_option
@friendly_errors
def show_command(run_id: str, message_count: int, store_url: str) -> None:
    """Show one run: summary, pending calls, messages, state.

    Prints the run's summary (a queued run: what it was submitted with), its pending tool
    calls with their ledger status, its last messages briefly, and its business_state."""
    with ops.open_existing_store(store_url) as store:
        view = ops.inspect_run(store, run_id)
    console = make_console()
    if view.state is None:
        assert view.queued is not None
        print_queued(console, view.queued)
        return
    print_run(console, view, view.state, message_count)


@main.command("history")
@click.argument("run_id", metavar="RUN")
@click.option("--tail", type=click.IntRange(0), default=0, help="Only the last N save points (0: all).")
@store_option
@friendly_errors
def history_command(run_id: str, tail: int, store_url: str) -> None:
    """List a run's save points, oldest first."""
    with ops.open_existing_store(store_url) as store:
        view = ops.inspect_run(store, run_id)
        notes = ops.settlements(store, run_id) if view.state is not None else {}
    console = make_console()
    if view.state is None:
        assert view.queued is not None
        console.print(f"run {escape(run_id)} is queued (submitted, not started yet): it has no save point")
        return
    timeline = view.timeline[-tail:] if tail > 0 else view.timeline
    console.print(history_table(timeline, title=f"save points of {escape(run_id)}"))
    shown = {info.seq for info in timeline}
    if any(seq in shown for seq in notes):
        console.print("crashes, and how each call left without a result was settled:")
    for seq, lines in notes.items():
        for line in lines if seq in shown else ():
            console.print(f"  save {seq}: {escape(line)}")
    if view.problem:
        console.print(f"[yellow]warning:[/] {escape(view.problem)}; the table stops at the last intact save point")


@main.command("export")
@click.argument("run_id", metavar="RUN")
@click.option("--out", "out_path", type=click.Path(dir_okay=False, path_type=Path), help="Write to FILE, not stdout.")
@store_option
@friendly_errors
def export_command(run_id: str, out_path: Path | None, store_url: str) -> None:
    """Print a run's full state as JSON.

    The JSON holds the run's fields, every message, its save points and its effect ledger."""
    with ops.open_existing_store(store_url) as store:
        document = ops.export_run(store, run_id)
    text = json.dumps(document, ensure_ascii=False, indent=2)
    if document["damaged"]:
        click.echo(f"warning: {document['damaged']}; exported the last intact save point", err=True)
    if out_path is None:
        click.echo(text)
        return
    try:
        out_path.write_text(text + "\n", encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot write {out_path}: {exc.strerror or exc}") from exc
    click.echo(f"wrote {out_path} ({len(text.encode()) + 1:,} bytes)", err=True)


@main.command("import")
@click.argument("checkpoint", metavar="FILE", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--run-id", default=None, help="Id of the new run (default: the file's run_id, if it has one).")
@store_option
@friendly_errors
def import_command(checkpoint: Path, run_id: str | None, store_url: str) -> None:
    """Turn another harness's checkpoint file into a run.

    Reads a textbook checkpoint.json (version, task, turns, tokensUsed, messages,
    pendingToolUse) or a practice-article checkpoint (run_id, step_id, phase, messages,
    business_state, pending_action, schema_version). A pending call becomes an in-doubt call:
    `unbroken resume` re-runs it if it is read-only and otherwise asks its probe or tells the
    model its outcome is unknown. Creates the store if needed; never overwrites a run."""
    with open_store(store_url) as store:
        state = ops.import_run(store, checkpoint, run_id)
    pending = ", ".join(f"{call.name} ({call.id})" for call in state.pending_calls) or "none"
    console = make_console()
    console.print(
        f"imported {escape(str(checkpoint))} as run {escape(state.run_id)}: {state.turns} turns, "
        f"{state.tokens_used:,} tokens, {len(state.messages)} messages; pending calls: {escape(pending)}"
    )
    console.print(f"next: unbroken resume {escape(state.run_id)} --agent module:attr --store {escape(store_url)}")


@main.command("migrate")
@click.option("--apply", "apply_changes", is_flag=True, help="Rewrite the runs that need it (default: dry run).")
@store_option
@friendly_errors
def migrate_command(apply_changes: bool, store_url: str) -> None:
    """Check checkpoint schema versions (--apply: migrate).

    Lists each run's checkpoint schema version and what migrating it would do; nothing is
    changed without --apply, which rewrites runs at an older version (atomically, one run at
    a time). Exits 1 if --apply fails for a run."""
    failures = to_apply = 0
    rows = []
    with ops.open_existing_store(store_url) as store:
        for summary in store.list_runs():
            plan = ops.plan_migration(store, summary.run_id)
            action = escape(plan.action)
            to_apply += plan.verdict == "migrate"
            if plan.verdict == "blocked" and apply_changes:
                failures += 1
                action = f"[red]not migrated:[/] {action}"
            elif plan.verdict == "migrate" and apply_changes:
                try:
                    ops.migrate_run(store, summary.run_id)
                    action = f"[green]migrated[/] from schema {plan.version} to {SCHEMA_VERSION}"
                except (LeaseHeld, IncompatibleSchema, CorruptCheckpoint) as exc:
                    failures += 1
                    action = f"[red]not migrated:[/] {escape(str(exc))}"
            rows.append((plan, summary.phase, action))
    console = make_console()
    title = f"checkpoint schema of runs in {escape(store_url)} (current: {SCHEMA_VERSION})"
    console.print(migration_table(rows, title, applied=apply_changes))
    if not apply_changes:
        verb = f"run with --apply to migrate {to_apply} run(s)" if to_apply else "no run needs migrating"
        console.print(f"dry run: nothing was changed; {verb}")
    if failures:
        sys.exit(1)
