"""Long operations (export, migrate, gc, recover, import) show progress on a terminal and print
nothing of it when their output is piped."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys

from cli_helpers import Place


def unbroken(*args: str, terminal: bool) -> tuple[int, str, str]:
    """Run ``unbroken ARGS`` in a fresh process, its stderr a terminal (a pty) or a pipe."""
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "UNBROKEN_CRASH_AT")}
    command = [sys.executable, "-m", "unbroken.cli", *args]
    if not terminal:
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
        return done.returncode, done.stdout, done.stderr
    leader, follower = pty.openpty()
    try:
        child = subprocess.Popen(command, env={**env, "TERM": "xterm"}, stdout=subprocess.PIPE, stderr=follower)
        os.close(follower)
        seen = b""
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # the child closed the terminal
                break
            if not chunk:
                break
            seen += chunk
        out = child.communicate(timeout=60)[0]
        return child.wait(), out.decode(), seen.decode(errors="replace")
    finally:
        os.close(leader)


def test_progress_shows_on_a_terminal_and_never_in_a_pipe(seeded: Place) -> None:
    # export, migrate, gc, recover and import all report through _render.progress: one command shows it
    code, out, err = unbroken("export", "done-run", "--store", seeded.url, terminal=False)
    assert code == 0, err
    assert "exporting" not in err
    assert json.loads(out)["state"]["run_id"] == "done-run"  # stdout is the document alone
    code, out, err = unbroken("migrate", "--store", seeded.url, terminal=True)
    assert code == 0, err
    assert "checking runs" in err
