"""One account of each call (issue 21 item 6): a run killed ten times (four of them during a model
call) is resumed ten times, and `unbroken history` and the inspector both say so, in the words
the engine recorded when it settled each call; nothing is reconstructed by the readers."""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from click.testing import CliRunner
from crash_checks import history_problems, run_child
from crash_service import CountingService

from unbroken import open_store
from unbroken.cli import main

# Where each of the ten processes is killed (the eleventh runs to the end). Each kill lands after
# the previous resume made some progress, except those at a model call, which come back to it.
KILLS = [
    "model.before_call:1",  # the first process: saved its start, killed asking the model
    "model.before_call:1",  # the resume: killed asking the model again
    "tool.after_execute:1",  # read_file ran, its result not saved
    "save.tool_result.after:1",  # read_file run again and saved
    "tool.after_execute:1",  # put_object ran (attempt 1), its outcome not saved
    "save.tool_result.after:1",  # put_object run again with the same key (attempt 2), saved
    "tool.after_execute:1",  # send_email sent, its outcome not saved
    "model.before_call:1",  # the probe found the email; the turn closed; killed asking the model
    "model.before_call:1",  # killed asking the model again
    "tool.after_execute:1",  # the second email sent, its outcome not saved
]


def test_ten_kills_are_ten_resumes_in_history_and_in_the_inspector(
    tmp_path: Path, run_id: str, service: CountingService
) -> None:
    # One store is enough (the account is in the record, the same bytes on all): SQLite packing
    # after every save, so the records read back have been moved into sealed segments.
    store_url = f"sqlite:///{tmp_path / 'runs.db'}?keep_recent=1&pack_batch=2&sealed_read_from=0"
    args = ["agent", "--store", store_url, "--run-id", run_id, "--service", str(service.path), "--probe"]
    for point in KILLS:
        child = run_child(args, crash_at=point)
        assert child.killed, f"not killed at {point}: {child.stdout} {child.stderr}"
    done = run_child(args)
    assert done.returncode == 0 and done.outcome["status"] == "completed", done.stderr
    with open_store(store_url) as store:
        assert history_problems(store.load(run_id).messages) == []
        assert store.load(run_id).resumes == len(KILLS)
    assert len(service.effects("send")) == 2 and all(n == 1 for n in service.effects("send").values())

    shown = CliRunner().invoke(main, ["history", run_id, "--store", store_url, "--all"])
    assert shown.exit_code == 0, shown.output
    text = " ".join(shown.output.split())  # rich wraps long lines
    assert text.count("resumed after save") == len(KILLS)
    assert f"resumed {len(KILLS)} time(s) up to save point" in text
    assert text.count("the previous process ended during a model call") == 4
    started_before = "it was started before and its outcome never recorded"
    assert f"call toolu_put (put_object): {started_before}; run again (attempt 2)" in text
    assert (
        f"call toolu_mail (send_email): {started_before}; the probe found that it took effect; not run again: the "
        "probe's result is its result" in text
    )

    page = _inspector_page(store_url, run_id)
    assert page["crashes"] == len(KILLS)
    notes = [line for save in page["timeline"] for line in save["notes"]]
    assert sum(line.startswith("resumed after save") for line in notes) == len(KILLS)


def _inspector_page(store_url: str, run_id: str) -> dict[str, Any]:
    """The run page's JSON, from `unbroken ui` started as a user does."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {key: value for key, value in os.environ.items() if key != "UNBROKEN_CRASH_AT"}
    command = [sys.executable, "-m", "unbroken.cli", "ui", "--store", store_url, "--port", str(port)]
    server = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert server.stdout is not None
        ready, _, _ = select.select([server.stdout], [], [], 30)
        assert ready and server.stdout.readline().startswith("unbroken ui: http://")
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/runs/{run_id}", timeout=30) as response:
                    return dict(json.loads(response.read()))
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
    finally:
        server.send_signal(signal.SIGINT)
        try:
            server.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.communicate()
