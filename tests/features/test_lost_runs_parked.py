"""A run whose data the store lost under a worker is parked, never re-claimed (issue 23 item 6,
trust follow-up): the worker that finds the loss parks it, no worker (one that never saw it
saved included) claims it again, ``runs``/``show``/the inspector say ``data_lost``, and an
operator erases it or releases it with ``recover``.

The store is the simulator's ``ForgetfulStore``: a service that restarts back to its last sync
(as Redis with ``appendfsync everysec``, or a restore of an older backup), here after the run
was queued and before it saved anything."""

from __future__ import annotations

import time
from typing import Any

import pytest
from click.testing import CliRunner

from unbroken import Agent, LeaseHeld, ScriptedModel, Store, lost, ops, tool
from unbroken.cli import main
from unbroken.testing.simulate.lossy import ForgetfulStore
from unbroken.worker import Worker

FINAL: dict[str, Any] = {"content": [{"type": "text", "text": "done"}], "stop_reason": "end_turn", "usage": {}}


def charge_turn(n: int) -> dict[str, Any]:
    call = {"type": "tool_use", "id": f"t{n}", "name": "charge", "input": {"cents": 100 + n}}
    return {"content": [call], "stop_reason": "tool_use", "usage": {}}


def charging_agent(store: Store, charged: list[int], *, forget_after: int | None = None) -> Agent:
    """Three charges then done; the service restarts to its last sync after charge ``forget_after``."""

    @tool(effect="side_effect")
    def charge(cents: int) -> str:
        charged.append(cents)
        if forget_after is not None and len(charged) == forget_after and isinstance(store, ForgetfulStore):
            store.restart(everything=False)
        return "charged"

    return Agent(ScriptedModel([charge_turn(n) for n in range(3)] + [FINAL]), [charge], store)


def lose_a_running_run(store: ForgetfulStore, charged: list[int]) -> Worker:
    """Queue ``r1``, sync, and let a worker run it until the service forgets it (after one charge)."""
    store.submit("charge three times", "r1")
    store.sync()  # the service keeps the submission, not what the run saves next
    worker = Worker(lambda s: charging_agent(s, charged, forget_after=1), store, retry_after=0.05, poll_interval=0.01)
    stats = worker.run(until_idle=True, max_runs=1)
    assert (stats.data_lost, charged) == (1, [100])
    return worker


def test_a_run_lost_under_a_worker_is_never_claimed_again_by_any_worker() -> None:
    store, charged = ForgetfulStore(), list[int]()
    first = lose_a_running_run(store, charged)
    time.sleep(0.1)  # past the worker's retry_after: a mere hold would have expired

    fresh = Worker(lambda s: charging_agent(s, charged), store, retry_after=0.05, poll_interval=0.01)
    stats = fresh.run(until_idle=True, max_runs=3)
    claimed_before = first.stats.claimed
    again = first.run(until_idle=True, max_runs=3)

    assert (stats.claimed, again.claimed - claimed_before) == (0, 0)
    assert charged == [100]  # never charged again: a worker that never saw it saved would start it over
    assert lost.is_parked(store.backend.read_head("r1"))


def test_a_parked_run_shows_as_data_lost_in_runs_show_and_queued_listings() -> None:
    store, charged = ForgetfulStore(), list[int]()
    lose_a_running_run(store, charged)

    queued = ops.queued_run(store, "r1")
    page = ops.runs_page(store)
    view = ops.inspect_run(store, "r1")

    assert queued is not None and queued.lost and queued.phase == "data_lost"
    assert [(run.run_id, run.phase) for run in page.queued] == [("r1", "data_lost")]
    assert view.lost


def test_resuming_a_parked_run_by_hand_is_refused_saying_what_to_do() -> None:
    store, charged = ForgetfulStore(), list[int]()
    lose_a_running_run(store, charged)

    with pytest.raises(LeaseHeld, match="parked as lost") as refused:
        charging_agent(store, charged).run("charge three times", run_id="r1")

    assert "unbroken erase r1" in str(refused.value) and "unbroken recover r1" in str(refused.value)
    assert charged == [100]


def test_an_operator_erases_a_parked_run_and_its_queue_entry() -> None:
    store, charged = ForgetfulStore(), list[int]()
    lose_a_running_run(store, charged)

    erased = ops.erase(store, "r1")

    assert erased.removed == ["r1"]
    assert store.backend.submission("r1") is None and store.backend.read_head("r1") is None


def test_recover_releases_a_parked_run_and_a_worker_takes_it_again() -> None:
    store, charged = ForgetfulStore(), list[int]()
    lose_a_running_run(store, charged)

    done = ops.recover(store, "r1")
    stats = Worker(lambda s: charging_agent(s, charged), store, poll_interval=0.01).run(until_idle=True, max_runs=1)

    assert done.released and done.seq == 0
    assert stats.finished == 1  # from its task: the operator chose it, knowing the charge may repeat
    assert charged == [100, 100, 101, 102]


def test_parking_a_run_no_longer_queued_brings_nothing_back() -> None:
    store = ForgetfulStore()
    store.submit("t", "gone")
    store.delete_run("gone")

    assert lost.park(store, "gone") is False
    assert store.backend.read_head("gone") is None


def test_the_cli_lists_and_recovers_a_parked_run(tmp_path: Any) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    from unbroken import open_store

    with open_store(url) as store:
        store.submit("charge three times", "r1")
        assert lost.park(store, "r1")

    listed = CliRunner().invoke(main, ["runs", "--store", url])
    shown = CliRunner().invoke(main, ["show", "r1", "--store", url])
    released = CliRunner().invoke(main, ["recover", "r1", "--store", url])

    assert listed.exit_code == 0 and "data_lost" in listed.output, listed.output
    assert shown.exit_code == 0 and "parked as lost" in shown.output, shown.output
    assert released.exit_code == 0 and "released" in released.output, released.output
    with open_store(url) as store:
        assert not lost.is_parked(store.backend.read_head("r1"))


def test_a_parked_run_with_save_points_lists_as_data_lost_and_shows_why() -> None:
    from unbroken import open_store

    store = open_store("memory://")
    store.submit("charge three times", "r2")
    with pytest.raises(Exception, match="ScriptExhausted"):  # saved, then the model is gone: not finished
        Agent(ScriptedModel([charge_turn(0)]), [], store).run("charge three times", run_id="r2")
    assert lost.park(store, "r2")

    listed = {run.run_id: run.phase for run in ops.runs_page(store).runs}
    view = ops.inspect_run(store, "r2")

    assert listed == {"r2": "data_lost"}
    assert view.lost and view.state is not None and view.state.phase == "awaiting_model"  # the saved state, untouched
