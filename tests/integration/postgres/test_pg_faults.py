"""The connection dropped in the middle of a step: nothing of the step is visible until it
is written whole, and the run continues on a new connection."""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

import pytest
from pgtest import Outage, connect, with_options

from unbroken import Agent, RunResult, ScriptedModel, tool
from unbroken.errors import StoreUnavailable
from unbroken.stores.postgres import PostgresStore


def test_a_connection_killed_mid_step_leaves_no_partial_step_and_the_run_continues(pg_url: str) -> None:
    app = f"ub-drop-{uuid.uuid4().hex[:8]}"
    store = PostgresStore(with_options(pg_url, application_name=app))
    blocker = connect(store.backend.schema)
    executions: list[str] = []

    @tool(effect="side_effect")
    def send(to: str) -> str:
        executions.append(to)
        # Hold the run's row so the save that records this result blocks inside the server.
        blocker.execute("BEGIN")
        blocker.execute("SELECT 1 FROM unbroken_runs WHERE run_id = 'r1' FOR UPDATE")
        return "sent"

    script: list[dict[str, Any]] = [
        {"content": [{"type": "tool_use", "id": "c1", "name": "send", "input": {"to": "bob"}}], "usage": {}},
        {"content": [{"type": "text", "text": "done"}], "stop_reason": "end_turn", "usage": {}},
    ]
    results: list[RunResult] = []
    runner = threading.Thread(
        target=lambda: results.append(Agent(ScriptedModel(script), [send], store).run("t", run_id="r1"))
    )
    runner.start()
    with connect(store.backend.schema) as observer:
        deadline = time.monotonic() + 10
        waiting = None
        while waiting is None and time.monotonic() < deadline:
            waiting = observer.execute(
                "SELECT pid FROM pg_stat_activity WHERE application_name = %s AND wait_event_type = 'Lock'", (app,)
            ).fetchone()
            time.sleep(0.02)
        assert waiting is not None, "the save never reached the server"
        observer.execute("SELECT pg_terminate_backend(%s)", waiting)
        # While the step is cut off, the stored run shows none of it.
        head = observer.execute("SELECT head_seq FROM unbroken_runs WHERE run_id = 'r1'").fetchone()
        seqs = observer.execute("SELECT seq FROM unbroken_records WHERE run_id = 'r1' ORDER BY seq").fetchall()
        ledger = observer.execute("SELECT status FROM unbroken_effects WHERE run_id = 'r1'").fetchall()
        blocker.execute("ROLLBACK")
    runner.join(timeout=30)
    blocker.close()
    assert (head, seqs, ledger) == ((2,), [(1,), (2,)], [("pending",)])
    assert results and results[0].status == "completed"
    assert [info.label for info in store.history("r1")] == ["start", "model_turn", "tools_done", "completed"]
    assert [entry.status for entry in store.ledger_list("r1")] == ["succeeded"]
    assert executions == ["bob"]
    store.close()


def outage_script() -> list[dict[str, object]]:
    return [
        {"content": [{"type": "tool_use", "id": "c1", "name": "send", "input": {"to": "bob"}}], "usage": {}},
        {"content": [{"type": "text", "text": "done"}], "stop_reason": "end_turn", "usage": {}},
    ]


def test_a_server_outage_shorter_than_retry_for_is_ridden_out_and_the_run_continues(
    pg_url: str, outage: Outage
) -> None:
    store = PostgresStore(with_options(outage.url(pg_url), retry_for="10"))
    executions: list[str] = []

    @tool(effect="side_effect")
    def send(to: str) -> str:
        executions.append(to)
        outage.down()  # the server goes away while the tool runs, before its result is saved
        threading.Timer(1.0, outage.up).start()
        return "sent"

    started = time.monotonic()
    result = Agent(ScriptedModel(outage_script()), [send], store).run("t", run_id="r1")
    print(f"\nserver unreachable for 1.0s mid-step: run completed {time.monotonic() - started:.2f}s after start")
    assert result.status == "completed"
    assert [info.label for info in store.history("r1")] == ["start", "model_turn", "tools_done", "completed"]
    assert executions == ["bob"]
    store.close()


def test_an_outage_longer_than_retry_for_fails_the_step_cleanly_and_the_run_resumes_later(
    pg_url: str, outage: Outage
) -> None:
    store = PostgresStore(with_options(outage.url(pg_url), retry_for="0.5"))
    executions: list[str] = []

    @tool(effect="side_effect")
    def send(to: str) -> str:
        executions.append(to)
        outage.down()
        return "sent"

    agent = Agent(ScriptedModel(outage_script()), [send], store)
    with pytest.raises(StoreUnavailable, match=r"gave up after 0.5s"):
        agent.run("t", run_id="r1")
    outage.up()
    assert [info.label for info in store.history("r1")] == ["start", "model_turn"]  # the step is all or nothing
    time.sleep(0.1)
    resumed = agent.run("t", run_id="r1")
    assert resumed.status == "completed"
    assert executions == ["bob"]  # its intent was saved, so the call is not repeated blindly
    assert resumed.reconciled and resumed.reconciled[0][2] == "unknown"
    store.close()
