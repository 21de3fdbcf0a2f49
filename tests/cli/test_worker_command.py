"""``unbroken worker``: its own lines at INFO, the SDKs' only with -v; its summary counts the runs
it took over from a killed worker, how their interrupted calls were settled, and what waits."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import worker_agents
from cli_helpers import HERE, Place

from unbroken import open_store

AGENT = "worker_agents:chatty_agent"


def worker(place: Place, *options: str, crash_at: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "UNBROKEN_CRASH_AT"}
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), env.get("PYTHONPATH", "")])
    if crash_at:
        env["UNBROKEN_CRASH_AT"] = crash_at
    command = [sys.executable, "-m", "unbroken.cli", "worker", "--agent", AGENT, "--store", place.url]
    return subprocess.run([*command, "--until-idle", *options], env=env, capture_output=True, text=True, timeout=60)


def submit(place: Place, run_id: str) -> None:
    with open_store(place.url) as store:
        store.submit("Tell Ann her order shipped", run_id, agent=AGENT)


def test_a_worker_taking_over_a_killed_workers_run_logs_its_own_lines_and_counts_what_it_did(place: Place) -> None:
    submit(place, "taken")
    killed = worker(place, crash_at="tool.after_execute:1")
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    time.sleep(1.2)  # the killed worker's lease (1 s) expires
    second = worker(place)
    assert second.returncode == 0, second.stderr
    summary = next(line for line in second.stderr.splitlines() if line.startswith("worker: 1 finished"))
    assert "(1 taken over from an earlier process)" in summary
    assert "calls settled on resume: 1 " in summary
    assert "1 paused on an unknown outcome" in summary and "0 awaiting approval" in summary
    assert worker_agents.SDK_LINE not in killed.stderr + second.stderr  # the SDK's INFO lines: only with -v
    assert worker_agents.OWN_LINE in killed.stderr


def test_with_v_the_worker_logs_the_sdks_info_lines_too(place: Place) -> None:
    submit(place, "loud")
    loud = worker(place, "-v")
    assert loud.returncode == 0, loud.stderr
    assert worker_agents.SDK_LINE in loud.stderr and worker_agents.OWN_LINE in loud.stderr
