"""The README's example file works as documented: run, SIGKILL mid-run, run again."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "quickstart.py"


def run(tmp_path: Path, crash_at: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "UNBROKEN_CRASH_AT")}
    env["QUICKSTART_DIR"] = str(tmp_path / "quickstart")
    if crash_at:
        env["UNBROKEN_CRASH_AT"] = crash_at
    return subprocess.run([sys.executable, str(EXAMPLE)], env=env, capture_output=True, text=True, timeout=60)


def test_the_quickstart_example_survives_a_kill_after_its_email_and_sends_one(tmp_path: Path) -> None:
    killed = run(tmp_path, "tool.after_execute:5")  # the fifth tool run is the email
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert len(list((tmp_path / "quickstart" / "outbox").glob("*.json"))) == 1
    resumed = run(tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout.startswith("completed:") and "(resumed)" in resumed.stdout
    assert "after 6 turns" in resumed.stdout
    assert len(list((tmp_path / "quickstart" / "outbox").glob("*.json"))) == 1
    assert (tmp_path / "quickstart" / "report.md").read_text().startswith("| ticket |")
