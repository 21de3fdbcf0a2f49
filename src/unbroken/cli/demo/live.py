"""``unbroken demo --live``: the same agent and the same kill-and-resume, against the real
Anthropic or OpenAI API when an API key is set; the scripted demo when none is.

A real model does not follow the script, so the kill lands at a save point that every run
reaches (after the agent's fourth round of tool results), and the checks are the ones that
hold for any model: the process died by SIGKILL, the run resumed instead of starting over,
turns and tokens carried over, every tool call has exactly one result, and no email was sent
twice (one outbox file per idempotency key, each matching a succeeded ledger entry).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import tempfile
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from ... import open_store
from .crash_resume import run_child, run_demo
from .scenario import OUTBOX_DIR, RUN_ID, SCRIPT_FILE, build_agent, store_url
from .script import build_script

KEY_VARS = ("ANTHROPIC_API_KEY", "OPENAI_API_KEY")
LIVE_CRASH_AT = "save.tools_done.after:4"


def api_key_set() -> bool:
    return any(os.environ.get(name) for name in KEY_VARS)


def run_live_demo(workdir: Path | None, *, keep: bool, console: Console) -> int:
    """Run the demo against the real API if a key is set, else say so and run the scripted demo."""
    if not api_key_set():
        console.print(
            "[yellow]No ANTHROPIC_API_KEY or OPENAI_API_KEY is set: falling back to the scripted model.[/] "
            "Set one of them to run this same agent against the real API."
        )
        return run_demo(workdir, keep=keep, console=console)
    created = workdir is None
    workdir = Path(tempfile.mkdtemp(prefix="unbroken-live-demo-")) if workdir is None else workdir
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        return _tell_live(workdir.resolve(), console)
    finally:
        if created and not keep:
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            console.print(f"\nwork dir kept: {escape(str(workdir))}")


def _tell_live(workdir: Path, console: Console) -> int:
    (workdir / SCRIPT_FILE).write_text(json.dumps(build_script()), encoding="utf-8")
    provider = "Anthropic" if os.environ.get("ANTHROPIC_API_KEY") else "OpenAI"
    console.rule(f"[bold]unbroken demo --live[/]: the {provider} API, killed with SIGKILL, resumed")
    first = run_child(workdir, LIVE_CRASH_AT, live=True)
    killed = first.returncode == -signal.SIGKILL
    store = open_store(store_url(workdir))
    try:
        at_kill = store.load(RUN_ID, recover=True)
        console.print(
            f"1. killed after {first.seconds:.1f} s at save point {at_kill.save_seq} "
            f"(turn {at_kill.turns}, {at_kill.tokens_used:,} tokens)"
        )
        second = run_child(workdir, None, live=True)
        report = second.report()
        final = store.load(RUN_ID)
        dangling = build_agent(workdir, store, live=True).model.dangling_call_ids(final.messages)
        emails = sorted(path.stem for path in (workdir / OUTBOX_DIR).glob("*.json"))
        settled = sorted(
            entry.key
            for entry in store.ledger_list(RUN_ID)
            if entry.tool == "email_team" and entry.status == "succeeded"
        )
    finally:
        store.close()
    console.print(
        f"2. resumed in {report['resume_seconds'] * 1000:.1f} ms; finished with status {report['status']}, "
        f"{final.turns} turns, {final.tokens_used:,} tokens"
    )
    checks = [
        ("the first process died by SIGKILL", killed),
        ("the second process resumed the run", bool(report["resumed"])),
        ("turns and tokens carried over", final.turns >= at_kill.turns and final.tokens_used >= at_kill.tokens_used),
        ("every tool call has its result", not dangling),
        ("no email sent twice: one outbox file per settled email call", emails == settled),
    ]
    for label, ok in checks:
        console.print(f"  {'[green]PASS[/]' if ok else '[red]FAIL[/]'}  {label}")
    return 0 if all(ok for _, ok in checks) else 1
