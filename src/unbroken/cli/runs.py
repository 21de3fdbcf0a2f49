"""Commands about stored runs: runs, show, history, export, import, migrate. Each asks ``ops``
and hands what it got to ``_render``.

Read-only commands never create a store: a SQLite file or store directory that does not exist
is reported as such instead of being created empty.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.markup import escape

from .. import SCHEMA_VERSION, ops, paging
from ..codec import save_info
from ..errors import ConfigError, CorruptCheckpoint, IncompatibleSchema, LeaseHeld, RunNotFound
from ..state import RunSummary, SaveInfo
from ..stores import Store, open_store
from ._app import friendly_errors, main, store_option
from ._render import (
    echo,
    history_table,
    make_console,
    migration_table,
    print_hint,
    print_queued,
    print_run,
    progress,
    resume_hint,
    runs_table,
)
from ._safe import json_for_terminal


@main.command("runs")
@click.option(
    "--limit",
    type=click.IntRange(1),
    default=ops.RUNS_PAGE,
    show_default=True,
    help="List the N most recently updated runs.",
)
@click.option("--all", "show_all", is_flag=True, help="List every run, read and printed a page at a time.")
@store_option
@friendly_errors
def runs_command(limit: int, show_all: bool, store_url: str) -> None:
    """List the runs in the store, most recently updated first; queued runs last.

    Lists the 50 most recently updated runs and the 50 oldest queued ones by default (--limit
    N, or --all for every one, a page of 500 at a time). Cost: one page read (store.runs_page):
    about N rows on PostgreSQL and Redis (an index by update time); on SQLite, file, S3 and
    memory stores a scan of every run's summary keeping the newest N (docs/stores.md); queued
    runs a page of N (store.unstarted_runs; indexed on SQLite and PostgreSQL)."""
    console = make_console()
    title = f"runs in {escape(store_url)}"
    with ops.open_existing_store(store_url) as store:
        if show_all:
            listed = 0
            for page in ops.iter_runs(store):  # queued runs come last, a page at a time too
                if page.rows:
                    console.print(runs_table(page.rows, title=title if not listed else None))
                listed += len(page.rows)
            if not listed:
                console.print(f"no runs in {escape(store_url)}")
            return
        page = ops.runs_page(store, limit=limit)
    if not page.rows:
        console.print(f"no runs in {escape(store_url)}")
        return
    console.print(runs_table(page.rows, title=title))
    if page.next is not None:
        console.print(f"the {len(page.runs)} most recently updated runs; more: --limit N or --all")
    if page.queued_next is not None:
        console.print(f"the {len(page.queued)} oldest queued runs; more: --limit N or --all")


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
    calls with their ledger status, its last messages briefly, and its business_state. Reads
    only the run's tail (its newest snapshot, the saves after it, the last messages)."""
    with ops.open_existing_store(store_url) as store:
        view = ops.inspect_run(store, run_id, messages=message_count, ledger=0)  # the pending calls' entries
    console = make_console()
    if view.state is None:
        assert view.queued is not None
        print_queued(console, view.queued)
        return
    print_run(console, view, view.state, message_count)


LAST_SAVES = 50


@main.command("history")
@click.argument("run_id", metavar="RUN")
@click.option(
    "--last",
    "--tail",
    "last",
    type=click.IntRange(0),
    default=None,
    help=f"Only the last N save points (default {LAST_SAVES}; 0: all).",
)
@click.option("--from", "from_seq", type=click.IntRange(1), default=None, help="From save point SEQ on (N of them).")
@click.option("--all", "show_all", is_flag=True, help="Every save point, streamed a page at a time.")
@store_option
@friendly_errors
def history_command(run_id: str, last: int | None, from_seq: int | None, show_all: bool, store_url: str) -> None:
    """List a run's save points, oldest first.

    Shows the last 50 by default, reading only those (and the saves back to the snapshot before
    them); --from SEQ shows the N from SEQ on; --all (or --last 0) every one, streamed. Damage in
    the save points read is reported (the table stops at the last intact one); damage in older
    ones is reported by --all, `unbroken export` and `unbroken show` of a damaged tail."""
    console = make_console()
    with ops.open_existing_store(store_url) as store:
        try:
            head = store.head_of(run_id)
            if head is None or head.seq <= 0:
                store.decode(run_id)  # never saved: RunNotFound (or queued), or lost records
        except RunNotFound:
            if ops.queued_run(store, run_id) is None:
                raise
            console.print(f"run {escape(run_id)} is queued (submitted, not started yet): it has no save point")
            return
        assert head is not None
        if show_all or last == 0:
            _history_all(console, store, run_id)
            return
        if from_seq is not None and from_seq > head.seq:
            raise click.BadParameter(
                f"run {run_id!r} has save points 1..{head.seq}; there is nothing from {from_seq} on",
                param_hint="--from",
            )
        count = LAST_SAVES if last is None else last
        first = from_seq if from_seq is not None else max(1, head.seq - count + 1)
        page = paging.timeline_page(store, run_id, first, first + count - 1)
        notes = ops.settlements(store, run_id, records=page.records)
    _history_table(console, run_id, page.saves, notes, title=True)
    _print_resumes(console, page.fields)
    shown = page.saves
    oldest = page.first or 1
    if shown and (shown[0].seq > oldest or shown[-1].seq < page.head):
        before = f"--from {max(oldest, shown[0].seq - count)}" if shown[0].seq > oldest else ""
        console.print(
            f"save points {shown[0].seq}..{shown[-1].seq} of {page.head}; earlier or later: "
            f"{before or '--from SEQ'}, or --all"
        )
    if page.problem:
        console.print(f"[yellow]warning:[/] {escape(page.problem)}; the table stops at the last intact save point")


def _print_resumes(console: Console, fields: dict[str, Any] | None) -> None:
    """How many times the run was resumed in all, as its state counts them (``fields``: folded
    through the last save point shown; each resume's record says what it found)."""
    resumes = int((fields or {}).get("resumes", 0))
    if resumes:
        upto = (fields or {}).get("save_seq", "?")
        console.print(f"resumed {resumes} time(s) up to save point {upto} (a crash or a stop each)")


def _history_table(
    console: Console, run_id: str, saves: list[SaveInfo], notes: dict[int, list[str]], *, title: bool
) -> None:
    console.print(history_table(saves, title=f"save points of {escape(run_id)}" if title else None))
    shown = {info.seq for info in saves}
    if any(seq in shown for seq in notes):
        console.print("what each resume found, and how calls were settled (as the engine recorded it):")
    for seq, lines in notes.items():
        for line in lines if seq in shown else ():
            console.print(f"  save {seq}: {escape(line)}")


def _history_all(console: Console, store: Store, run_id: str) -> None:
    """Every save point, a page at a time (constant memory). Damage stops the stream there; the
    whole-run decode then says what is wrong, as ``store.history`` reports it."""
    first = True
    fields: dict[str, Any] | None = None
    try:
        for saves, records, folded in _pages(store, run_id):
            _history_table(console, run_id, saves, ops.settlements(store, run_id, records=records), title=first)
            first, fields = False, folded
        _print_resumes(console, fields)
    except paging.Unusual:
        decoded = store.decode(run_id, recover=True)
        if first:  # nothing shown yet: the save points before the damage
            _history_table(console, run_id, decoded.timeline, {}, title=True)
        if decoded.problem:
            console.print(
                f"[yellow]warning:[/] {escape(decoded.problem)}; the table stops at the last intact save point"
            )


def _pages(store: Store, run_id: str) -> Iterator[tuple[list[SaveInfo], list[dict[str, Any]], dict[str, Any]]]:
    """Every save point with its record and the fields folded through the page's last one, a
    page at a time (constant memory)."""
    saves: list[SaveInfo] = []
    records: list[dict[str, Any]] = []
    folded: dict[str, Any] = {}
    head = store.head_of(run_id)
    for record, fields in paging.walk(store, run_id, 0, head.seq if head is not None else 0):
        saves.append(save_info(record, fields))
        records.append(record)
        folded = fields
        if len(saves) >= paging.PAGE_RECORDS:
            yield saves, records, folded
            saves, records = [], []
    if saves:
        yield saves, records, folded


@main.command("export")
@click.argument("run_id", metavar="RUN")
@click.option("--out", "out_path", type=click.Path(dir_okay=False, path_type=Path), help="Write to FILE, not stdout.")
@store_option
@friendly_errors
def export_command(run_id: str, out_path: Path | None, store_url: str) -> None:
    """Print a run's full state as JSON.

    The JSON holds the run's fields, every message, its save points and its effect ledger. It
    is written as it is read, a page of save records at a time (constant memory); with --out
    it goes to a temporary file renamed at the end, so FILE is never left half written."""
    with ops.open_existing_store(store_url) as store:
        if out_path is None:
            with progress(f"exporting run {run_id} (bytes)") as advance:
                damaged = ops.export_run_to(
                    store, run_id, _counted(lambda text: sys.stdout.write(json_for_terminal(text)), advance)
                )
            sys.stdout.write("\n")
            sys.stdout.flush()
            written = None
        else:
            damaged, written = _export_to_file(store, run_id, out_path)
    if damaged:
        echo(f"warning: {damaged}; exported the last intact save point", err=True)
    if written is not None:
        click.echo(f"wrote {out_path} ({written:,} bytes)", err=True)


def _counted(write: Callable[[str], object], advance: Callable[[int], None]) -> Callable[[str], object]:
    def counted(text: str) -> object:
        advance(len(text))
        return write(text)

    return counted


def _export_to_file(store: Store, run_id: str, out_path: Path) -> tuple[str | None, int]:
    partial = out_path.with_name(f".{out_path.name}.partial")
    try:
        with partial.open("w", encoding="utf-8") as out, progress(f"exporting run {run_id} (bytes)") as advance:
            damaged = ops.export_run_to(store, run_id, _counted(out.write, advance))
            out.write("\n")
        os.replace(partial, out_path)
        return damaged, out_path.stat().st_size
    except OSError as exc:
        raise ConfigError(f"cannot write {out_path}: {exc.strerror or exc}") from exc
    finally:
        partial.unlink(missing_ok=True)


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
    with open_store(store_url) as store, progress(f"importing {checkpoint}"):
        state = ops.import_run(store, checkpoint, run_id)
    pending = ", ".join(f"{call.name} ({call.id})" for call in state.pending_calls) or "none"
    console = make_console()
    console.print(
        f"imported {escape(str(checkpoint))} as run {escape(state.run_id)}: {state.turns} turns, "
        f"{state.tokens_used:,} tokens, {len(state.messages)} messages; pending calls: {escape(pending)}"
    )
    print_hint(console, f"next: {escape(resume_hint(state.run_id))}")


@main.command("migrate")
@click.option("--apply", "apply_changes", is_flag=True, help="Rewrite the runs that need it (default: dry run).")
@store_option
@friendly_errors
def migrate_command(apply_changes: bool, store_url: str) -> None:
    """Check checkpoint schema versions (--apply: migrate).

    Lists each run's checkpoint schema version and what migrating it would do; nothing is
    changed without --apply, which rewrites runs at an older version (atomically, one run at
    a time). Exits 1 if --apply fails for a run."""
    with ops.open_existing_store(store_url) as store:
        summaries = store.list_runs()
        with progress("checking runs" + (" and migrating" if apply_changes else ""), len(summaries)) as advance:
            rows = [_migrate_one(store, summary, apply_changes, advance) for summary in summaries]
    failures = sum(1 for _plan, _phase, _action, failed in rows if failed)
    to_apply = sum(1 for plan, _phase, _action, _failed in rows if plan.verdict == "migrate")
    console = make_console()
    title = f"checkpoint schema of runs in {escape(store_url)} (current: {SCHEMA_VERSION})"
    console.print(migration_table([row[:3] for row in rows], title, applied=apply_changes))
    if not apply_changes:
        verb = f"run with --apply to migrate {to_apply} run(s)" if to_apply else "no run needs migrating"
        console.print(f"dry run: nothing was changed; {verb}")
    if failures:
        sys.exit(1)


def _migrate_one(
    store: Store, summary: RunSummary, apply_changes: bool, advance: Callable[[int], None]
) -> tuple[ops.MigrationPlan, str, str, bool]:
    """One run's row: its plan, phase, what was (or would be) done, and whether it failed."""
    try:
        plan = ops.plan_migration(store, summary.run_id)
        action, failed = escape(plan.action), False
        if plan.verdict == "blocked" and apply_changes:
            action, failed = f"[red]not migrated:[/] {action}", True
        elif plan.verdict == "migrate" and apply_changes:
            try:
                ops.migrate_run(store, summary.run_id)
                action = f"[green]migrated[/] from schema {plan.version} to {SCHEMA_VERSION}"
            except (LeaseHeld, IncompatibleSchema, CorruptCheckpoint) as exc:
                action, failed = f"[red]not migrated:[/] {escape(str(exc))}", True
        return plan, summary.phase, action, failed
    finally:
        advance(1)
