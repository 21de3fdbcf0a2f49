"""Submitting runs and claiming them, on both stores that support workers (PostgreSQL, and
SQLite for processes on one machine)."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pgtest import fresh_schema

from unbroken import Agent, ScriptedModel, resolve_call, tool
from unbroken.errors import OutcomeUnknown, TaskMismatch, Unsupported
from unbroken.stores import open_store
from unbroken.stores.base import UNCLAIMABLE_PHASES, Store

FINAL = {"content": [{"type": "text", "text": "done"}], "stop_reason": "end_turn", "usage": {}}


@pytest.fixture(params=["postgres", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    if request.param == "sqlite":
        with open_store(f"sqlite:///{tmp_path / 'runs.db'}") as opened:
            yield opened
        return
    with fresh_schema() as (_, url), open_store(url) as opened:
        yield opened


def test_a_submitted_run_is_claimed_once_with_its_task_and_a_fresh_fence(store: Store) -> None:
    run_id = store.submit("write the report", "r1", agent="app:triage")
    claimed = store.claim_runnable("w1", 30, agent="app:triage")
    assert [(c.run_id, c.task, c.agent, c.lease.owner) for c in claimed] == [
        ("r1", "write the report", "app:triage", "w1")
    ]
    assert run_id == "r1"
    assert store.claim_runnable("w2", 30) == []
    lease = store.lease_of("r1")
    assert lease is not None and lease.fence == claimed[0].lease.fence


def test_submit_makes_a_run_id_when_none_is_given(store: Store) -> None:
    assert re.fullmatch(r"run-[0-9a-f]{12}", store.submit("t"))


def test_submitting_the_same_run_twice_is_harmless_but_another_task_is_refused(store: Store) -> None:
    store.submit("t", "r1")
    store.submit("t", "r1")
    with pytest.raises(TaskMismatch):
        store.submit("other task", "r1")
    assert len(store.claim_runnable("w", 30, limit=10)) == 1


def test_workers_only_claim_runs_submitted_for_their_agent(store: Store) -> None:
    store.submit("t", "for-a", agent="a")
    store.submit("t", "for-b", agent="b")
    assert [c.run_id for c in store.claim_runnable("w", 30, agent="b", limit=5)] == ["for-b"]
    assert [c.run_id for c in store.claim_runnable("w", 30, limit=5)] == ["for-a"]


def test_a_run_whose_lease_expired_is_claimed_again_under_a_higher_fence(store: Store) -> None:
    store.submit("t", "r1")
    first = store.claim_runnable("dead-worker", 0.2)[0]
    assert store.claim_runnable("w2", 30) == []
    time.sleep(0.3)
    second = store.claim_runnable("w2", 30)[0]
    assert second.lease.fence > first.lease.fence


def test_a_finished_run_is_not_claimed_again(store: Store) -> None:
    store.submit("t", "r1")
    agent = Agent(ScriptedModel([FINAL]), [], store, lease_ttl=0.1)
    store.claim_runnable(agent.owner, 0.1)  # as a worker does: claim under the agent's owner name
    agent.run("t", run_id="r1", owner=agent.owner)  # re-enters the claim, as Worker does
    time.sleep(0.2)
    assert store.load("r1").phase == "completed"
    assert store.claim_runnable("w", 30) == []


def test_a_paused_run_is_not_claimed_until_it_is_resolved(store: Store) -> None:
    @tool(effect="side_effect")
    def send(to: str) -> str:
        raise OutcomeUnknown("the connection broke after the request was sent")  # it cannot tell: pause

    store.submit("t", "r1")
    script: list[dict[str, Any]] = [
        {"content": [{"type": "tool_use", "id": "c1", "name": "send", "input": {"to": "x"}}], "usage": {}},
        FINAL,
    ]
    result = Agent(ScriptedModel(script), [send], store, unknown_policy="pause", lease_ttl=30).run("t", run_id="r1")
    assert result.status == "paused"
    assert store.claim_runnable("w", 30) == []
    resolve_call(store, "r1", "c1", result="sent")
    assert [c.run_id for c in store.claim_runnable("w", 30)] == ["r1"]


def test_a_run_started_directly_is_not_claimed_unless_submitted(store: Store) -> None:
    store.acquire_lease("direct", "someone", 0.1)
    time.sleep(0.2)
    assert store.claim_runnable("w", 30) == []


def test_runs_are_claimed_oldest_submission_first(store: Store) -> None:
    for run_id in ("a", "b", "c"):
        store.submit("t", run_id)
        time.sleep(0.01)
    assert [c.run_id for c in store.claim_runnable("w", 30, limit=3)] == ["a", "b", "c"]


def test_concurrent_claimers_never_get_the_same_run(store: Store) -> None:
    for i in range(40):
        store.submit("t", f"r{i}")
    got: list[str] = []
    barrier = threading.Barrier(4)

    def claimer(name: str) -> None:
        barrier.wait()
        while claimed := store.claim_runnable(name, 30, limit=3):
            got.extend(c.run_id for c in claimed)

    threads = [threading.Thread(target=claimer, args=(f"w{i}",)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(got) == sorted(f"r{i}" for i in range(40))


def test_stores_without_claiming_say_which_stores_can(tmp_path: Path) -> None:
    with open_store(f"file://{tmp_path}/store") as files, pytest.raises(Unsupported, match=r"postgresql://"):
        files.submit("t")


def test_the_claim_query_excludes_exactly_the_phases_the_store_rule_names() -> None:
    sql_dir = Path(__file__).parents[3] / "src/unbroken/stores/sql/postgres"
    wanted = sorted(UNCLAIMABLE_PHASES)
    schema = (sql_dir / "schema.sql").read_text()
    latest = sorted((sql_dir / "migrations").glob("*.sql"))[-1].read_text()
    texts = [(sql_dir / "queries.sql").read_text(), schema, latest]
    for text in texts:
        for listed in re.findall(r"phase NOT IN \(([^)]*)\)", text):
            assert sorted(re.findall(r"'(\w+)'", listed)) == wanted
    # The list lives in the generated column phase_claimable (migration 0008), which the claim
    # and its index read: a change of UNCLAIMABLE_PHASES needs a migration that redefines it.
    assert re.search(r"phase_claimable boolean GENERATED ALWAYS AS \(\s*phase IS NULL OR phase NOT IN", schema)
    assert "WHERE submitted_at IS NOT NULL AND phase_claimable" in (sql_dir / "queries.sql").read_text()
