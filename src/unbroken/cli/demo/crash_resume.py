"""``unbroken demo``: run the scenario in a child process, SIGKILL it mid-run, resume it in a
second child process, and show (and check) what happened.

The kill lands in the nastiest window there is: right after ``email_team`` delivered its email
and before that outcome was saved (``UNBROKEN_CRASH_AT=tool.after_execute:N``, N counted from the
script). The run's last save point then holds the model's answer with the email call pending,
and the ledger says the email was *about* to be sent. A naive resume would send it again; unbroken
asks the tool's probe, which finds it in the outbox, and the run goes on from turn 15 of 29.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ... import ConfigError, RunState, ScriptedModel, open_store
from ...crashpoints import ENV_VAR as CRASH_ENV_VAR
from .scenario import REPORT_FILE, RUN_ID, SCRIPT_FILE, load_tickets, outbox_emails, store_url, task_text
from .script import build_script, crash_spec, expected_totals, turn_of_call

CHILD_TIMEOUT = 120.0


@dataclass
class ChildRun:
    pid: int
    returncode: int
    seconds: float
    stdout: str
    stderr: str

    def report(self) -> dict[str, Any]:
        lines = [line for line in self.stdout.splitlines() if line.strip()]
        if self.returncode != 0 or not lines:
            raise ConfigError(
                f"the demo's agent process exited with status {self.returncode}: {self.stderr.strip()[-400:]}"
            )
        data: dict[str, Any] = json.loads(lines[-1])
        return data


def run_child(workdir: Path, crash_at: str | None, *, live: bool = False) -> ChildRun:
    """Run ``python -m unbroken.cli.demo.child`` on ``workdir``; armed to crash when ``crash_at`` is set."""
    env = dict(os.environ)
    env.pop(CRASH_ENV_VAR, None)
    if crash_at:
        env[CRASH_ENV_VAR] = crash_at
    package_root = str(Path(__file__).resolve().parents[3])  # so the child imports this same unbroken
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
    started = time.perf_counter()
    with subprocess.Popen(
        [sys.executable, "-m", "unbroken.cli.demo.child", "--workdir", str(workdir), *(["--live"] if live else [])],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as process:
        try:
            stdout, stderr = process.communicate(timeout=CHILD_TIMEOUT)
        except subprocess.TimeoutExpired:
            process.kill()
            stdout, stderr = process.communicate()
        return ChildRun(process.pid, process.returncode, time.perf_counter() - started, stdout, stderr)


def report_table_rows(path: Path) -> list[list[str]]:
    """The rows of the markdown table in ``report.md`` (header first), or [] if there is none."""
    if not path.exists():
        return []
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("|") and not set(line) <= set("|-: "):
            rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
    return rows


def run_demo(workdir: Path | None, *, keep: bool, console: Console) -> int:
    """Tell the crash-and-resume story; return 0 if every check passed, else 1."""
    created = workdir is None
    if workdir is None:
        workdir = Path(tempfile.mkdtemp(prefix="unbroken-demo-"))
    elif workdir.exists() and any(workdir.iterdir()):
        raise ConfigError(f"--workdir {workdir} is not empty; give a new or empty directory")
    workdir.mkdir(parents=True, exist_ok=True)
    workdir = workdir.resolve()
    try:
        return _tell(workdir, console)
    finally:
        if created and not keep:
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            url = store_url(workdir)
            console.print(f"\nwork dir kept: {escape(str(workdir))}. Look around with:")
            for command in ("runs", f"history {RUN_ID}", f"show {RUN_ID}", f"effects {RUN_ID}"):
                console.print(f"  unbroken {command} --store {escape(url)}")


def _tell(workdir: Path, console: Console) -> int:
    script = build_script()
    (workdir / SCRIPT_FILE).write_text(json.dumps(script, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    crash_at = crash_spec(script, "email_team")
    email_turn = turn_of_call(script, "email_team")
    expected_turns, expected_tokens = expected_totals(script)
    url = store_url(workdir)
    tickets = load_tickets()["tickets"]

    console.rule("[bold]unbroken demo[/]: a long agent run, killed with SIGKILL, resumed in a new process")
    console.print(f"task: {escape(task_text())}")
    console.print(
        f"model: ScriptedModel, {expected_turns} Anthropic-shaped answers (no network, no API key); "
        f"{len(tickets)} tickets shipped with unbroken"
    )
    console.print(
        "tools: read_ticket [dim](read_only)[/], write_report [dim](idempotent)[/], "
        "email_team [dim](side_effect, probe: looks the idempotency key up in the outbox)[/]"
    )
    console.print(f"store: {escape(url)}\n")

    console.print(
        f"[bold]1. Run the agent in a child process[/], armed to SIGKILL itself right after email_team has "
        f"delivered its email (turn {email_turn}) and before that outcome is saved "
        f"[dim]({CRASH_ENV_VAR}={crash_at})[/]"
    )
    first = run_child(workdir, crash_at)
    killed = first.returncode == -signal.SIGKILL
    how = "killed by SIGKILL" if killed else f"[red]exited with status {first.returncode}[/]"
    console.print(f"   process {first.pid} {how} after {first.seconds:.2f} s")
    if not killed:
        console.print(f"[red]{escape(first.stderr.strip()[-600:])}[/]")
        return 1

    with open_store(url) as store:
        decoded = store.decode(RUN_ID)
        ledger_at_crash = store.ledger_list(RUN_ID)
    before = decoded.state
    last = decoded.timeline[-1]
    emails_at_crash = len(outbox_emails(workdir))
    email_entry = next((e for e in ledger_at_crash if e.tool == "email_team"), None)
    console.print("\n[bold]2. Where it died[/]")
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column()
    grid.add_row("last save point", f"#{last.seq} '{last.label}': turn {last.turns}, phase {last.phase}")
    grid.add_row("pending calls", ", ".join(f"{c.name} ({c.id})" for c in before.dangling_calls()) or "none")
    grid.add_row(
        "effect ledger", f"email_team: {email_entry.status if email_entry else 'no entry'} (intent saved, outcome not)"
    )
    grid.add_row("outbox", f"{emails_at_crash} email(s): it was delivered before the kill")
    console.print(grid)

    console.print("\n[bold]3. Resume in a fresh process[/] (same command, no crash armed)")
    second = run_child(workdir, None)
    outcome = second.report()
    resume_ms = (outcome["resume_seconds"] or 0.0) * 1000
    console.print(
        f"   process {second.pid}: resumed in {resume_ms:.1f} ms (load + reconcile, ready for the model); "
        f"whole process {second.seconds:.2f} s"
    )
    for item in outcome["reconciled"]:
        note = " (the probe found the email in the outbox; not sent again)" if item["how"] == "probed" else ""
        console.print(f"   reconciled {escape(item['tool'])} {escape(item['call_id'])}: {escape(item['how'])}{note}")

    with open_store(url) as store:
        after_decoded = store.decode(RUN_ID)
        ledger_after = store.ledger_list(RUN_ID)
    after = after_decoded.state
    _print_carry_over(console, before, after, last.seq, expected_turns, expected_tokens)

    from .._render import ledger_table

    console.print()
    console.print(ledger_table(ledger_after, title="effect ledger after the resume", compact=True))
    report_rows = report_table_rows(workdir / REPORT_FILE)
    if report_rows:
        table = Table(title=f"{REPORT_FILE}: the agent's report", title_justify="left")
        for index, name in enumerate(report_rows[0]):
            table.add_column(name, justify="right" if index in (1, 2) else "left")
        for row in report_rows[1:]:
            table.add_row(*(escape(cell) for cell in row))
        console.print(table)

    emails = outbox_emails(workdir)
    email_after = next((e for e in ledger_after if e.tool == "email_team"), None)
    labels = [info.label for info in after_decoded.timeline]
    turns_seen = [info.turns for info in after_decoded.timeline]
    total_row = next((row for row in report_rows if row and row[0] == "Total"), None)
    checks = [
        ("the first process died by SIGKILL", killed),
        (
            "it died after the email left and before its outcome was saved",
            emails_at_crash == 1 and email_entry is not None and email_entry.status == "pending",
        ),
        (
            "the second process resumed the run instead of starting over",
            bool(outcome["resumed"]) and labels.count("start") == 1 and turns_seen == sorted(turns_seen),
        ),
        (
            f"turns and tokens carried over ({before.turns} -> {after.turns} turns): each answer counted once",
            before.turns == email_turn and after.turns == expected_turns and after.tokens_used == expected_tokens,
        ),
        ("exactly one email in the outbox", len(emails) == 1),
        (
            "the email was settled by its probe, not sent again",
            email_after is not None
            and email_after.status == "succeeded"
            and email_after.attempts == 1
            and any(i["tool"] == "email_team" and i["how"] == "probed" for i in outcome["reconciled"]),
        ),
        ("every tool call in the history has its result", not ScriptedModel([]).dangling_call_ids(after.messages)),
        (f"the report covers all {len(tickets)} tickets", total_row is not None and total_row[1] == str(len(tickets))),
        ("the run completed", outcome["status"] == "completed" and after.phase == "completed"),
    ]
    console.print("\n[bold]Checks[/]")
    for text, passed in checks:
        console.print(f"  {'[green]PASS[/]' if passed else '[red]FAIL[/]'}  {escape(text)}")
    failed = [text for text, passed in checks if not passed]
    if failed:
        console.print(f"[red]demo failed: {len(failed)} check(s) did not hold[/]")
        return 1
    console.print("[green]all checks passed[/]")
    return 0


def _print_carry_over(
    console: Console, before: RunState, after: RunState, crash_seq: int, expected_turns: int, expected_tokens: int
) -> None:
    table = Table(title="carried over, never restarted from zero", title_justify="left")
    table.add_column("")
    for name in ("at the kill", "after the resume", "a run with no crash"):
        table.add_column(name, justify="right")
    table.add_row("turns", str(before.turns), str(after.turns), str(expected_turns))
    table.add_row("tokens", f"{before.tokens_used:,}", f"{after.tokens_used:,}", f"{expected_tokens:,}")
    table.add_row("messages", str(len(before.messages)), str(len(after.messages)), "")
    table.add_row("save points", str(crash_seq), str(after.save_seq), "")
    console.print()
    console.print(table)
