"""The README's quick start works as written: its kill-and-resume steps, run from the README's
own text, kill the example right after its email, resume it with one email sent, and work again
on a second try; the example writes nothing into the directory it is run from."""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "quickstart.py"
CRASH_SPEC = re.compile(r"UNBROKEN_CRASH_AT=(\S+)")


def readme_steps() -> list[list[str]]:
    """The README's shell lines that run the example, as argument lists (comments dropped)."""
    steps, in_shell_block = [], False
    for line in (ROOT / "README.md").read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            in_shell_block = line.strip() == "```sh"
            continue
        command = line.split("#", 1)[0].strip()
        if in_shell_block and "examples/quickstart.py" in command:
            steps.append(shlex.split(command))
    return steps


def run_step(argv: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Run one README line: ``VAR=value ... python examples/quickstart.py ARGS``."""
    step_env = dict(env)
    while "=" in argv[0]:
        name, _, value = argv.pop(0).partition("=")
        step_env[name] = value
    assert argv[:2] == ["python", "examples/quickstart.py"], argv
    return subprocess.run(
        [sys.executable, str(EXAMPLE), *argv[2:]], cwd=cwd, env=step_env, capture_output=True, text=True, timeout=60
    )


def clean_env(tmp_path: Path) -> dict[str, str]:
    dropped = ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "UNBROKEN_CRASH_AT", "QUICKSTART_DIR")
    env = {k: v for k, v in os.environ.items() if k not in dropped}
    env["TMPDIR"] = str(tmp_path / "tmp")  # where the example keeps its state by default
    (tmp_path / "tmp").mkdir()
    return env


def test_the_readme_kill_and_resume_steps_send_one_email_and_work_on_a_second_try(tmp_path: Path) -> None:
    steps = readme_steps()
    assert [("UNBROKEN_CRASH_AT=" in " ".join(step)) for step in steps] == [False, True, False], steps
    env, cwd = clean_env(tmp_path), tmp_path / "checkout"
    cwd.mkdir()
    outbox = tmp_path / "tmp" / "unbroken-quickstart" / "outbox"
    for attempt in (1, 2):
        first, killed, resumed = (run_step(list(step), cwd, env) for step in steps)
        assert first.returncode == 0 and first.stdout.startswith("completed:"), (attempt, first.stderr)
        assert killed.returncode == -signal.SIGKILL, (attempt, killed.stderr)
        assert len(list(outbox.glob("*.json"))) == 1  # killed right after the email went out
        assert resumed.returncode == 0, (attempt, resumed.stderr)
        assert resumed.stdout.startswith("completed:") and "(resumed)" in resumed.stdout, resumed.stdout
        assert "after 6 turns" in resumed.stdout and "; 1 email(s)" in resumed.stdout
        assert len(list(outbox.glob("*.json"))) == 1
    assert list(cwd.iterdir()) == []  # nothing written where it was run from


def test_the_readme_and_the_example_name_the_same_crash_point() -> None:
    in_readme = {spec for step in readme_steps() for spec in CRASH_SPEC.findall(" ".join(step))}
    in_example = set(CRASH_SPEC.findall(EXAMPLE.read_text(encoding="utf-8")))
    assert in_readme == in_example == {"tool.after_execute:5"}


def test_running_a_finished_example_again_says_so_without_resuming(tmp_path: Path) -> None:
    env = clean_env(tmp_path)
    assert run_step(["python", "examples/quickstart.py", "--fresh"], tmp_path, env).returncode == 0
    again = run_step(["python", "examples/quickstart.py"], tmp_path, env)
    assert again.returncode == 0 and again.stdout.startswith("completed:")
    assert "(resumed)" not in again.stdout
