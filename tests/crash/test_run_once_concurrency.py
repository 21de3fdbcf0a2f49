"""Two concurrent executions of one idempotency key execute once: threads of one process, and
separate processes, racing ``EffectLedger.run_once`` on one store, counted by the service."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from crash_checks import DRIVER
from crash_service import CountingService

from unbroken import EffectLedger, Store, ToolCall, ToolResult, open_store

THREADS = 8
PROCESSES = 4


@pytest.mark.parametrize("sharing", ["one store for all threads", "a store per thread"])
def test_eight_threads_racing_one_key_send_one_email(
    store_url: str, run_id: str, service: CountingService, sharing: str
) -> None:
    shared = open_store(store_url)
    stores: list[Store] = [shared if sharing.startswith("one") else open_store(store_url) for _ in range(THREADS)]
    call = ToolCall("toolu_race", "send_email", {"to": "customer@example.com"}, idempotency_key=f"race-{run_id}")
    barrier = threading.Barrier(THREADS)
    outcomes: list[ToolResult] = []
    errors: list[BaseException] = []

    def execute() -> ToolResult:
        time.sleep(0.05)  # hold the claim while the others arrive
        return ToolResult(call.id, service.send(call.idempotency_key, "customer@example.com", "race"))

    def race(store: Store) -> None:
        try:
            barrier.wait()
            outcomes.append(EffectLedger(store, run_id).run_once(call, execute, wait=20.0))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=race, args=(store,)) for store in stores]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    for store in {id(s): s for s in stores}.values():
        store.close()

    assert errors == []
    assert service.effects("send") == {call.idempotency_key: 1}
    assert sorted(result.how for result in outcomes) == ["executed"] + ["reused"] * (THREADS - 1)
    assert {result.content for result in outcomes} == {"sent message 1 to customer@example.com"}


def test_processes_racing_one_key_send_one_email(
    store_url: str, run_id: str, service: CountingService, tmp_path: Path
) -> None:
    go = tmp_path / "go"
    args = ["once", "--store", store_url, "--run-id", run_id, "--service", str(service.path), "--go", str(go)]
    children = [
        subprocess.Popen(
            [sys.executable, str(DRIVER), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for _ in range(PROCESSES)
    ]
    try:
        deadline = time.monotonic() + 30
        while len(list(tmp_path.glob("go.ready.*"))) < PROCESSES and time.monotonic() < deadline:
            time.sleep(0.01)
        go.touch()
        finished = [child.communicate(timeout=60) for child in children]
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
                child.wait()
    assert [child.returncode for child in children] == [0] * PROCESSES, [err for _, err in finished]
    hows = sorted(json.loads(out.strip().splitlines()[-1])["how"] for out, _ in finished)
    assert hows == ["executed"] + ["reused"] * (PROCESSES - 1)
    assert service.effects("send") == {f"race-{run_id}": 1}
    assert len({row["pid"] for row in service.rows()}) == 1
