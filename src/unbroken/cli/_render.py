"""Everything the command line prints goes through here: the console, the styles, the tables.

Commands (and the demo) decide nothing here; they hand over what an operation returned."""

from __future__ import annotations

import json
import logging
import os
import shlex
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Any

import click
from rich.console import Console, ConsoleOptions, RenderableType
from rich.json import JSON
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.segment import Segment
from rich.table import Table

from .. import LedgerEntry, RunResult, RunState, RunSummary, lost
from ..message_parts import render_message
from ..ops import MigrationPlan, QueuedRun, RunView
from ._safe import UNSAFE, clean

PHASE_STYLES = {
    "completed": "green",
    "failed": "red",
    "paused": "yellow",
    "awaiting_approval": "yellow",
    "max_turns": "magenta",
    "awaiting_model": "cyan",
    "running_tools": "cyan",
    "queued": "blue",
    "data_lost": "red",
}


class SafeConsole(Console):
    """A console that passes every piece of text it renders through :func:`clean`.

    The one place the CLI's output is made safe: tables, grids, JSON, Live panels and titles
    are all rendered through ``render``, so a command cannot forget. Segments rich marks as
    control (its own cursor moves) are its own, not stored text, and pass unchanged."""

    def render(self, renderable: RenderableType, options: ConsoleOptions | None = None) -> Iterable[Segment]:
        for segment in super().render(renderable, options):
            if segment.control is None and UNSAFE.search(segment.text):
                yield Segment(clean(segment.text), segment.style)
            else:
                yield segment


AGENT_PLACEHOLDER = "module:attr"
"""What a hint puts where the operator names their agent (the CLI cannot know it)."""


def next_command(*words: str) -> str:
    """A command to run next, as the operator can paste it: shell-quoted, repeating ``--store URL``
    when this command was given one on its command line (from ``$UNBROKEN_STORE`` or the default,
    the next command finds the same store by itself). The one place every hint is written."""
    parts = ["unbroken", *words]
    context = click.get_current_context(silent=True)
    if context is not None and context.get_parameter_source("store_url") is click.core.ParameterSource.COMMANDLINE:
        parts += ["--store", str(context.params["store_url"])]
    return f"`{shlex.join(parts)}`"


def resume_hint(run_id: str) -> str:
    return next_command("resume", run_id, "--agent", AGENT_PLACEHOLDER)


def print_hint(console: Console, text: str) -> None:
    """A line holding a command: never wrapped or cut, so it can be copied whole."""
    console.print(text, soft_wrap=True)


def make_console(*, stderr: bool = False) -> Console:
    """A rich console that shows stored text safely (:class:`SafeConsole`); when the output
    is not a terminal, wide enough that ids are never cut."""
    probe = SafeConsole(stderr=stderr)
    if probe.is_terminal or os.environ.get("COLUMNS"):
        return probe
    return SafeConsole(stderr=stderr, width=200)


class CleanLogFormatter(logging.Formatter):
    """Log lines through :func:`clean`: a tool's exception message is stored text too."""

    def format(self, record: logging.LogRecord) -> str:
        return clean(super().format(record))


def echo(text: str, *, err: bool = False) -> None:
    """One plain line (no rich styling) through :func:`clean`: for output that is parsed by
    scripts, such as a run id or an error message that quotes stored text."""
    click.echo(clean(text), err=err)


@contextmanager
def progress(description: str, total: int | None = None) -> Iterator[Callable[[int], None]]:
    """Progress of a long operation on stderr, shown only when stderr is a terminal (piped or
    redirected, nothing is printed). Yields ``advance(n)``; ``total`` None: a spinner and a count."""
    console = make_console(stderr=True)
    if not console.is_terminal:
        yield lambda _n: None
        return
    columns = [SpinnerColumn(), TextColumn("{task.description}")]
    if total is not None:
        columns += [BarColumn(), MofNCompleteColumn()]
    else:
        columns += [TextColumn("{task.completed:,}")]
    with Progress(*columns, TimeElapsedColumn(), console=console, transient=True) as shown:
        task = shown.add_task(description, total=total)
        yield lambda n: shown.advance(task, n)


def when(timestamp: float | None, *, precise: bool = False) -> str:
    if not timestamp:
        return "-"
    moment = datetime.fromtimestamp(timestamp).astimezone()
    return moment.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] if precise else moment.strftime("%Y-%m-%d %H:%M:%S")


def phase_text(phase: str | None) -> str:
    phase = phase or "queued"
    return f"[{PHASE_STYLES.get(phase, 'white')}]{phase}[/]"


def brief(value: Any, limit: int = 80) -> str:
    """One line of at most ``limit`` characters, cleaned before it is measured (so a table
    lays out what is shown, not the control characters it replaced)."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    text = clean(" ".join(text.split()))
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


def describe_message(provider: str, message: Any) -> str:
    """One line per message: role and a short view of each part (text, thinking marked as such,
    tool calls with their arguments, results with their call id), the same reading of the
    provider's format as the inspector's (``unbroken.message_parts``)."""
    rendered = render_message(provider, 0, message)
    return f"{rendered['role']}: " + "; ".join(_describe_part(part) for part in rendered["parts"])


def _describe_part(part: dict[str, Any]) -> str:
    kind = part["kind"]
    if kind == "text":
        return repr(brief(part["text"], 70))
    if kind == "thinking":
        return f"(thinking: {brief(part['text'], 40)})"
    if kind == "tool_call":
        return f"call {part['name']}({brief(part['arguments'] or {}, 60)}) [{part['id']}]"
    if kind == "tool_result":
        error = " ERROR" if part.get("is_error") else ""
        return f"result{error} [{part['id']}] {brief(part['text'], 60)!r}"
    return f"({brief(part['text'], 60)})"


STATUS_STYLES = {"pending": "yellow", "succeeded": "green", "failed": "red", "unknown": "bold red"}


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
            resolve = next_command("resolve", result.run_id, call.id, "--result", "TEXT")
            print_hint(
                console,
                f"[yellow]paused:[/] call {escape(call.id)} ({escape(call.name)}) has an unknown outcome. "
                f"Check it, then {escape(resolve)} (or --not-executed instead of --result), and resume again.",
            )
    if result.status == "awaiting_approval":
        print_hint(
            console,
            f"[yellow]awaiting approval:[/] {escape(next_command('approvals', result.run_id))} lists the calls "
            "to approve or deny, and how; then resume again.",
        )
    if result.output:
        console.print("[bold]output[/]")
        console.print(escape(result.output))


def runs_table(rows: Sequence[RunSummary | QueuedRun], title: str | None) -> Table:
    """One row per run: started runs with their counters, queued runs as ``queued``."""
    table = Table(title=title, title_justify="left")
    for name, justify in (("id", "left"), ("phase", "left"), ("turns", "right"), ("tokens", "right")):
        table.add_column(name, justify=justify, no_wrap=name == "id")  # type: ignore[arg-type]
    table.add_column("updated")
    table.add_column("task", overflow="ellipsis", max_width=50, no_wrap=True)
    for run in rows:
        if isinstance(run, QueuedRun):
            cells = [phase_text(run.phase), "-", "-", when(run.submitted_at)]
        else:
            cells = [phase_text(run.phase), str(run.turns), f"{run.tokens_used:,}", when(run.updated_at)]
        table.add_row(escape(run.run_id), *cells, escape(brief(run.task, 50)))
    return table


def print_queued(console: Console, run: QueuedRun) -> None:
    """A submitted run that no worker has started: what is known of it."""
    grid = _grid()
    grid.add_row("run", escape(run.run_id))
    grid.add_row("task", escape(brief(run.task, 160)))
    if run.lost:
        grid.add_row("phase", phase_text(run.phase) + f" ({escape(lost.refusal(run.run_id))})")
    else:
        grid.add_row("phase", phase_text("queued") + " (submitted, not started by a worker yet: no save point)")
    grid.add_row("agent", escape(run.agent or "any worker"))
    grid.add_row("submitted", when(run.submitted_at))
    console.print(grid)


def lease_text(view: RunView) -> str:
    if view.lost:
        return escape(lost.refusal(view.run_id))
    if view.lease is None:
        return "free (no live process)"
    if view.lease_holder_dead:
        return escape(f"held by {view.lease.owner}, whose process is dead: the next resume takes it over at once")
    return escape(f"held by {view.lease.owner}")


def print_run(console: Console, view: RunView, state: RunState, message_count: int) -> None:
    """``unbroken show``: summary, pending calls with their ledger status, last messages, state."""
    if view.problem:
        console.print(f"[yellow]warning:[/] {escape(view.problem)}; showing the last intact save point")
    grid = _grid()
    rows = [
        ("run", escape(state.run_id)),
        ("task", escape(brief(state.task, 160))),
        ("phase", phase_text(lost.LOST_PHASE if view.lost else state.phase)),
        ("turns", str(state.turns)),
        ("tokens", f"{state.tokens_used:,}  [dim]{escape(brief(state.usage, 120))}[/]"),
        ("save points", f"{state.save_seq} (schema {state.schema_version})"),
        ("messages", str(len(state.messages))),
        ("created", when(state.created_at)),
        ("updated", when(state.updated_at)),
        ("lease", lease_text(view)),
    ]
    if state.resumes:
        rows.append(("resumed", f"{state.resumes} time(s) (`unbroken history` says what each resume found)"))
    if state.output is not None:
        rows.append(("output", escape(brief(state.output, 300))))
    if state.error is not None:
        rows.append(("error", f"[red]{escape(state.error)}[/]"))
    for name, value in rows:
        grid.add_row(name, value)
    console.print(grid)
    ledger = view.call_entries
    if state.pending_calls:
        calls = Table(title="pending tool calls", title_justify="left")
        for name in ("call id", "tool", "input", "idempotency key", "result", "ledger"):
            calls.add_column(name, no_wrap=name in ("call id", "idempotency key"))
        for call in state.pending_calls:
            result = state.result_of(call)
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
            line = escape(describe_message(state.provider, state.messages[index]))
            console.print(f"  [dim]{index:>4}[/] {line}", soft_wrap=True)  # one line each, never cut
    console.print("[bold]business_state[/]")
    console.print(JSON.from_data(state.business_state))


def migration_table(rows: Sequence[tuple[MigrationPlan, str, str]], title: str, *, applied: bool) -> Table:
    """``unbroken migrate``: (plan, phase, what was done or would be done) per run."""
    table = Table(title=title)
    for name in ("run", "schema", "phase", "result" if applied else "migration"):
        table.add_column(name)
    for plan, phase, action in rows:
        version = "?" if plan.version is None else str(plan.version)
        table.add_row(escape(plan.run_id), version, phase_text(phase), action)
    return table


def _grid() -> Table:
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column()
    return grid
