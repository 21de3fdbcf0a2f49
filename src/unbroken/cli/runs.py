"""Commands about runs: runs, show, history, resume, export, migrate, demo.

Read-only commands never create a store: a SQLite file or store directory that does not exist
is reported as such instead of being created empty.
"""

from __future__ import annotations

import importlib
import inspect
import json
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import click
from rich.console import Console
from rich.json import JSON
from rich.markup import escape
from rich.table import Table

from .. import Agent, RunResult, RunState, Store, open_store
from ..codec import MIGRATIONS, encode_full, peek_version
from ..errors import ConfigError, CorruptCheckpoint, IncompatibleSchema, LeaseHeld, RunNotFound, StoreUnavailable
from ._app import friendly_errors, main, store_option

PHASE_STYLES = {
    "completed": "green",
    "failed": "red",
    "paused": "yellow",
    "max_turns": "magenta",
    "awaiting_model": "cyan",
    "running_tools": "cyan",
}


# --------------------------------------------------------------------------- shared helpers


def make_console(*, stderr: bool = False) -> Console:
    """A rich console; when the output is not a terminal, wide enough that ids are never cut."""
    probe = Console(stderr=stderr)
    if probe.is_terminal or os.environ.get("COLUMNS"):
        return probe
    return Console(stderr=stderr, width=200)


def open_run_store(url: str) -> Store:
    """Open an existing store; a SQLite file or store directory that is missing is an error
    (a typo in ``--store`` must not silently create an empty store)."""
    parts = urlsplit(url)
    if parts.scheme.lower() in ("sqlite", "file") and parts.netloc in ("", "localhost"):
        path = parts.path[1:] if parts.scheme.lower() == "sqlite" and parts.path.startswith("/") else parts.path
        if path and not Path(path).exists():
            raise StoreUnavailable(
                f"no unbroken store at {path} ({url}); pass --store URL or set UNBROKEN_STORE to your runs' store"
            )
    return open_store(url)


def when(timestamp: float | None, *, precise: bool = False) -> str:
    if not timestamp:
        return "-"
    moment = datetime.fromtimestamp(timestamp).astimezone()
    return moment.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] if precise else moment.strftime("%Y-%m-%d %H:%M:%S")


def phase_text(phase: str | None) -> str:
    phase = phase or "submitted"
    return f"[{PHASE_STYLES.get(phase, 'white')}]{phase}[/]"


def brief(value: Any, limit: int = 80) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def history_table(timeline: Sequence[Any], title: str | None = None) -> Table:
    """The save-point timeline (``SaveInfo`` rows) as a table."""
    table = Table(title=title, title_justify="left")
    for name, justify in (
        ("seq", "right"),
        ("label", "left"),
        ("phase", "left"),
        ("turns", "right"),
        ("tokens", "right"),
        ("messages added", "right"),
        ("time", "left"),
    ):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for info in timeline:
        label = info.label + (" [dim](snapshot)[/]" if info.snapshot else "")
        table.add_row(
            str(info.seq),
            label,
            phase_text(info.phase),
            str(info.turns),
            f"{info.tokens_used:,}",
            f"+{info.messages_added}" if info.messages_added else "0",
            when(info.at, precise=True),
        )
    return table


def describe_message(message: Any) -> str:
    """One line per message: role and a short view of each block."""
    if not isinstance(message, dict):
        return brief(message)
    role = message.get("role", message.get("type", "?"))
    content = message.get("content")
    if isinstance(content, str):
        return f"{role}: {brief(content)}"
    parts = []
    for block in content if isinstance(content, list) else []:
        kind = block.get("type", "?") if isinstance(block, dict) else type(block).__name__
        if kind == "text":
            parts.append(f"text {brief(block.get('text', ''), 60)!r}")
        elif kind == "thinking":
            parts.append("thinking" + (" (signed)" if block.get("signature") else ""))
        elif kind == "tool_use":
            parts.append(f"tool_use {block.get('name')}({brief(block.get('input', {}), 50)})")
        elif kind == "tool_result":
            error = " ERROR" if block.get("is_error") else ""
            parts.append(f"tool_result{error} {brief(block.get('content', ''), 50)!r}")
        else:
            parts.append(str(kind))
    return f"{role}: " + "; ".join(parts)


# --------------------------------------------------------------------------- runs, show, history


@main.command("runs")
@store_option
@friendly_errors
def runs_command(store_url: str) -> None:
    """List the runs in the store, most recently updated first."""
    with open_run_store(store_url) as store:
        summaries = store.list_runs()
    console = make_console()
    if not summaries:
        console.print(f"no runs in {escape(store_url)}")
        return
    table = Table(title=f"runs in {escape(store_url)}", title_justify="left")
    for name, justify in (("id", "left"), ("phase", "left"), ("turns", "right"), ("tokens", "right")):
        table.add_column(name, justify=justify, no_wrap=name == "id")  # type: ignore[arg-type]
    table.add_column("updated")
    table.add_column("task", overflow="ellipsis", max_width=50, no_wrap=True)
    for run in summaries:
        table.add_row(
            escape(run.run_id),
            phase_text(run.phase),
            str(run.turns),
            f"{run.tokens_used:,}",
            when(run.updated_at),
            escape(brief(run.task, 50)),
        )
    console.print(table)


@main.command("show")
@click.argument("run_id", metavar="RUN")
@click.option("--messages", "message_count", default=6, show_default=True, help="How many of the last messages.")
@store_option
@friendly_errors
def show_command(run_id: str, message_count: int, store_url: str) -> None:
    """Show one run: summary, pending calls, messages, state.

    Prints the run's summary, its pending tool calls with their ledger status, its last
    messages briefly, and its business_state."""
    with open_run_store(store_url) as store:
        decoded = store.decode(run_id, recover=True)
        state = decoded.state
        lease = store.lease_of(run_id)
        ledger = {entry.key: entry for entry in store.ledger_list(run_id)}
    console = make_console()
    if decoded.problem:
        console.print(f"[yellow]warning:[/] {escape(decoded.problem)}; showing the last intact save point")
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column()
    rows = [
        ("run", escape(state.run_id)),
        ("task", escape(brief(state.task, 160))),
        ("phase", phase_text(state.phase)),
        ("turns", str(state.turns)),
        ("tokens", f"{state.tokens_used:,}  [dim]{escape(brief(state.usage, 120))}[/]"),
        ("save points", f"{state.save_seq} (schema {state.schema_version})"),
        ("messages", str(len(state.messages))),
        ("created", when(state.created_at)),
        ("updated", when(state.updated_at)),
        ("lease", escape(f"held by {lease.owner}") if lease else "free (no live process)"),
    ]
    if state.output is not None:
        rows.append(("output", escape(brief(state.output, 300))))
    if state.error is not None:
        rows.append(("error", f"[red]{escape(state.error)}[/]"))
    for name, value in rows:
        grid.add_row(name, value)
    console.print(grid)
    if state.pending_calls:
        calls = Table(title="pending tool calls", title_justify="left")
        for name in ("call id", "tool", "input", "idempotency key", "result", "ledger"):
            calls.add_column(name, no_wrap=name in ("call id", "idempotency key"))
        for call in state.pending_calls:
            result = state.results.get(call.id)
            entry = ledger.get(call.idempotency_key)
            calls.add_row(
                escape(call.id),
                escape(call.name),
                escape(brief(call.input, 50)),
                call.idempotency_key,
                "none yet" if result is None else ("is_error" if result.is_error else "recorded") + f" ({result.how})",
                entry.status if entry else "-",
            )
        console.print(calls)
    if message_count > 0 and state.messages:
        start = max(0, len(state.messages) - message_count)
        console.print(f"[bold]last {len(state.messages) - start} of {len(state.messages)} messages[/]")
        for index in range(start, len(state.messages)):
            console.print(f"  [dim]{index:>4}[/] {escape(describe_message(state.messages[index]))}")
    console.print("[bold]business_state[/]")
    console.print(JSON.from_data(state.business_state))


@main.command("history")
@click.argument("run_id", metavar="RUN")
@click.option("--tail", default=0, help="Only the last N save points (0: all).")
@store_option
@friendly_errors
def history_command(run_id: str, tail: int, store_url: str) -> None:
    """List a run's save points, oldest first."""
    with open_run_store(store_url) as store:
        decoded = store.decode(run_id, recover=True)
    console = make_console()
    timeline = decoded.timeline[-tail:] if tail > 0 else decoded.timeline
    console.print(history_table(timeline, title=f"save points of {escape(run_id)}"))
    if decoded.problem:
        console.print(f"[yellow]warning:[/] {escape(decoded.problem)}; the table stops at the last intact save point")


# --------------------------------------------------------------------------- resume


def load_agent(spec: str) -> Agent:
    """Import ``module:attr`` (attr may be dotted) and return the Agent it names or builds."""
    module_name, _, attr_path = spec.partition(":")
    if not module_name or not attr_path:
        raise ConfigError(f"--agent {spec!r} must look like module:attr, for example myapp.agents:build_agent")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # like `python -m`: modules in the working directory resolve
    try:
        target: Any = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        raise ConfigError(f"--agent {spec!r}: no module named {exc.name or module_name!r}") from exc
    except Exception as exc:
        raise ConfigError(
            f"--agent {spec!r}: importing {module_name} raised {type(exc).__name__}: {exc} "
            f"(run `python -c 'import {module_name}'` to see where)"
        ) from exc
    for part in attr_path.split("."):
        if not hasattr(target, part):
            raise ConfigError(f"--agent {spec!r}: {module_name} has no attribute {attr_path!r}")
        target = getattr(target, part)
    if isinstance(target, Agent):
        return target
    if not callable(target):
        raise ConfigError(f"--agent {spec!r} is a {type(target).__name__}, not an Agent or a factory returning one")
    try:
        inspect.signature(target).bind()
    except TypeError as exc:
        raise ConfigError(f"--agent {spec!r} must be an Agent or a factory taking no arguments ({exc})") from exc
    except ValueError:
        pass  # no signature available (builtins): just call it
    built = target()
    if not isinstance(built, Agent):
        raise ConfigError(f"--agent {spec!r} returned a {type(built).__name__}, not an unbroken Agent")
    return built


def print_result(console: Console, result: RunResult) -> None:
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column()
    already_done = result.resume_seconds is None and result.status in ("completed", "max_turns", "failed")
    grid.add_row("run", escape(result.run_id))
    grid.add_row(
        "status", phase_text(result.status) + (" (already finished; model not called)" if already_done else "")
    )
    grid.add_row("turns", str(result.turns))
    grid.add_row("tokens", f"{result.tokens_used:,}")
    if result.resume_seconds is not None:
        grid.add_row("resume took", f"{result.resume_seconds * 1000:.1f} ms (load, reconcile, ready for the model)")
    if result.recovered_from:
        grid.add_row("recovered", f"[yellow]{escape(result.recovered_from)}[/]")
    console.print(grid)
    if result.reconciled:
        table = Table(title="calls reconciled on resume", title_justify="left")
        for name in ("call id", "tool", "how"):
            table.add_column(name)
        for call_id, tool_name, how in result.reconciled:
            table.add_row(escape(call_id), escape(tool_name), how)
        console.print(table)
    state: RunState | None = result.state
    if result.status == "paused" and state is not None:
        for call in state.dangling_calls():
            console.print(
                f"[yellow]paused:[/] call {escape(call.id)} ({escape(call.name)}) has an unknown outcome. "
                f"Check it, then `unbroken resolve {escape(result.run_id)} {escape(call.id)} --result TEXT` "
                "(or --not-executed), and resume again."
            )
    if result.output:
        console.print("[bold]output[/]")
        console.print(escape(result.output))


@main.command("resume")
@click.argument("run_id", metavar="RUN")
@click.option("--agent", "agent_spec", required=True, help="module:attr naming an Agent, or a factory returning one.")
@store_option
@click.pass_context
@friendly_errors
def resume_command(ctx: click.Context, run_id: str, agent_spec: str, store_url: str) -> None:
    """Resume a run from its last save point.

    Drives RUN on with the given agent until it completes, pauses or fails.
    The run is read from the agent's own store, unless --store (or UNBROKEN_STORE) is given,
    which then replaces it. Exits 1 if the run ends failed."""
    explicit_store = ctx.get_parameter_source("store_url") is not click.core.ParameterSource.DEFAULT
    store = None
    if explicit_store:
        store = open_run_store(store_url)
        if not store.exists(run_id):
            store.close()
            raise RunNotFound(f"no run {run_id!r} in {store_url}")
    agent = load_agent(agent_spec)
    if store is not None and store is not agent.store:
        agent.store.close()
        agent.store = store
    try:
        result = agent.run(None, run_id=run_id)
    finally:
        agent.store.close()
    print_result(make_console(), result)
    if result.status == "failed":
        sys.exit(1)


# --------------------------------------------------------------------------- export


@main.command("export")
@click.argument("run_id", metavar="RUN")
@click.option("--out", "out_path", type=click.Path(dir_okay=False, path_type=Path), help="Write to FILE, not stdout.")
@store_option
@friendly_errors
def export_command(run_id: str, out_path: Path | None, store_url: str) -> None:
    """Print a run's full state as JSON.

    The JSON holds the run's fields, every message, its save points and its effect ledger."""
    with open_run_store(store_url) as store:
        decoded = store.decode(run_id, recover=True)
        ledger = store.ledger_list(run_id)
    state = decoded.state
    document = {
        "format": "unbroken.export",
        "format_version": 1,
        "exported_at": time.time(),
        "damaged": decoded.problem,
        "state": {**state.small_fields(), "messages": state.messages},
        "save_points": [asdict(info) for info in decoded.timeline],
        "effect_ledger": [entry.to_json() for entry in ledger],
    }
    text = json.dumps(document, ensure_ascii=False, indent=2)
    if decoded.problem:
        click.echo(f"warning: {decoded.problem}; exported the last intact save point", err=True)
    if out_path is None:
        click.echo(text)
        return
    try:
        out_path.write_text(text + "\n", encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot write {out_path}: {exc.strerror or exc}") from exc
    click.echo(f"wrote {out_path} ({len(text.encode()) + 1:,} bytes)", err=True)


# --------------------------------------------------------------------------- migrate


def _plan(store: Store, run_id: str) -> tuple[int | None, str, str]:
    """(schema version of the first record, what migrate would do, and the verdict: ``current``,
    ``migrate`` or ``blocked`` (cannot be migrated by this unbroken)."""
    try:
        records = store.read_records(run_id)
    except RunNotFound:
        return None, "no save point yet (submitted, not started)", "current"
    version = peek_version(records[0])
    current = MIGRATIONS.current
    if version is None:
        return None, "cannot read its first save record; `unbroken show` reports the damage", "blocked"
    if version == current:
        return version, "up to date", "current"
    if version > current:
        return version, f"written by a newer unbroken (schema {version} > {current}); upgrade unbroken", "blocked"
    try:
        store.decode(run_id)
    except (IncompatibleSchema, CorruptCheckpoint) as exc:
        return version, f"cannot migrate: {exc}", "blocked"
    return version, f"rewrite {len(records)} save record(s) as one snapshot at schema {current}", "migrate"


def _apply(store: Store, run_id: str, version: int) -> None:
    from ..leases import acquire, make_owner

    lease = acquire(store, run_id, make_owner(), 30.0)  # LeaseHeld: a live process runs it
    try:
        head = store.read_records(run_id)[-1].seq
        state = store.decode(run_id).state  # folds and migrates in memory
        state.save_seq = head + 1
        state.updated_at = time.time()
        store.rewrite(
            run_id, [encode_full(state, f"migrated from schema {version}")], expect_seq=head, fence=lease.fence
        )
    finally:
        store.release_lease(lease)


@main.command("migrate")
@click.option("--apply", "apply_changes", is_flag=True, help="Rewrite the runs that need it (default: dry run).")
@store_option
@friendly_errors
def migrate_command(apply_changes: bool, store_url: str) -> None:
    """Check checkpoint schema versions (--apply: migrate).

    Lists each run's checkpoint schema version and what migrating it would do; nothing is
    changed without --apply, which rewrites runs at an older version (atomically, one run at
    a time). Exits 1 if --apply fails for a run."""
    console = make_console()
    failures = 0
    with open_run_store(store_url) as store:
        table = Table(title=f"checkpoint schema of runs in {escape(store_url)} (current: {MIGRATIONS.current})")
        for name in ("run", "schema", "phase", "migration" if not apply_changes else "result"):
            table.add_column(name)
        to_apply = 0
        for summary in store.list_runs():
            version, action, verdict = _plan(store, summary.run_id)
            action = escape(action)
            if verdict == "migrate":
                to_apply += 1
            if verdict == "blocked" and apply_changes:
                failures += 1
                action = f"[red]not migrated:[/] {action}"
            elif verdict == "migrate" and apply_changes:
                try:
                    _apply(store, summary.run_id, version or 0)
                    action = f"[green]migrated[/] from schema {version} to {MIGRATIONS.current}"
                except (LeaseHeld, IncompatibleSchema, CorruptCheckpoint) as exc:
                    failures += 1
                    action = f"[red]not migrated:[/] {escape(str(exc))}"
            version_text = "?" if version is None else str(version)
            table.add_row(escape(summary.run_id), version_text, phase_text(summary.phase), action)
    console.print(table)
    if not apply_changes:
        verb = f"run with --apply to migrate {to_apply} run(s)" if to_apply else "no run needs migrating"
        console.print(f"dry run: nothing was changed; {verb}")
    if failures:
        sys.exit(1)


# --------------------------------------------------------------------------- demo


@main.command("demo")
@click.option("--workdir", type=click.Path(file_okay=False, path_type=Path), help="Use this (empty) directory.")
@click.option("--keep", is_flag=True, help="Keep the temporary work dir (a --workdir is always kept).")
@click.option(
    "--live", is_flag=True, help="Use the real Anthropic/OpenAI API if an API key is set (else the scripted model)."
)
@friendly_errors
def demo_command(workdir: Path | None, keep: bool, live: bool) -> None:
    """Crash an agent run with SIGKILL, then resume it.

    Runs a ~30-turn scripted agent in a child process, kills it with SIGKILL right after it sent
    an email, resumes it in a new process and shows what happened. No network, no API key.
    Exits 1 if any of its checks fails."""
    if live:
        from ..demo.live import run_live_demo

        sys.exit(run_live_demo(workdir, keep=keep, console=make_console()))
    from ..demo.crash_resume import run_demo

    sys.exit(run_demo(workdir, keep=keep, console=make_console()))
