"""Issue 9.3, 9.4 and 9.6 as an outside auditor would try them, with real processes under
``Agent.run`` and ``Agent.arun``: the attempt cap when the kill lands before the tool starts,
a provider that duplicates a call id inside one turn, and a 100 MB result."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from hostile_kit import executions, journal, run_child, tool_results

from unbroken import open_store

RUN = "audit-run"


# `save.resumed.after`: right after a resume's own record (it was `save.attempt.after`, when the
# resume's record was labelled `attempt`; that label is now only the read-only start mark).
@pytest.mark.parametrize("later", ["tool.before_execute:1", "save.attempt.before:1", "save.resumed.after:1"])
def test_kills_that_land_before_the_tool_starts_do_not_use_up_its_attempts(
    sqlite_url: str, world: Path, driver: str, later: str
) -> None:
    # Five processes die before the read-only tool ever starts (the first right before it would
    # run, the others at `later` during their resume); the sixth must still run it, once.
    for point in ["tool.before_execute:1", *[later] * 4]:
        child = run_child("one_read", sqlite_url, RUN, world, "--driver", driver, crash_at=point)
        if not child.killed:
            break  # it settled the call without reaching `later` (the bug: capped, never run)
    else:
        assert executions(world)["read_file"] == 0
        child = run_child("one_read", sqlite_url, RUN, world, "--driver", driver)
    assert child.returncode == 0, child.stderr
    with open_store(sqlite_url) as store:
        (answer,) = tool_results(store.load(RUN).messages)
    assert answer["content"] == "contents of a.txt", answer
    assert executions(world)["read_file"] == 1


def test_a_provider_that_duplicates_an_id_inside_one_turn_gets_each_call_sent_once_after_a_kill(
    store_url: str, world: Path, driver: str
) -> None:
    crashed = run_child(
        "dup_ids", store_url, RUN, world, "--driver", driver, "--probe", crash_at="tool.after_execute:1"
    )
    assert crashed.killed, crashed.stderr
    resumed = run_child("dup_ids", store_url, RUN, world, "--driver", driver, "--probe")
    assert resumed.outcome == {"status": "completed", "turns": 2}, resumed.stderr

    sent = Counter(line["to"] for line in journal(world))
    assert sent == {"x@example.com": 1, "y@example.com": 1}
    with open_store(store_url) as store:
        answers = [block["content"] for block in tool_results(store.load(RUN).messages)]
    assert sorted(answers) == ["sent to x@example.com", "sent to y@example.com"]
    assert len(set(answers)) == 2, "no call receives another call's result"


def test_a_100_mb_result_is_cut_and_the_run_loads_in_a_fresh_process(sqlite_url: str, world: Path, driver: str) -> None:
    done = run_child("big", sqlite_url, RUN, world, "--driver", driver)
    assert done.outcome == {"status": "completed", "turns": 2}, done.stderr[-2000:]
    with open_store(sqlite_url) as store:
        (answer,) = tool_results(store.load(RUN).messages)
    assert len(answer["content"]) < 5 * 1024 * 1024
    assert "cut" in answer["content"] or "bytes" in answer["content"]


def test_a_100_mb_result_with_no_cut_is_refused_before_anything_is_written_and_the_run_still_loads(
    sqlite_url: str, world: Path, driver: str
) -> None:
    refused = run_child("big", sqlite_url, RUN, world, "--driver", driver, "--max-result-bytes", "none")
    assert refused.outcome.get("error") == "RecordTooLarge", refused.stdout + refused.stderr[-2000:]
    with open_store(sqlite_url) as store:
        state = store.load(RUN)  # every acknowledged save loads
    assert state.pending_calls, "the call stays in flight, nothing acknowledged past the cap"
    # The same agent with the default cut settles it (a read-only tool: run again, once more).
    finished = run_child("big", sqlite_url, RUN, world, "--driver", driver, "--big-mb", "1")
    assert finished.returncode == 0, finished.stderr[-2000:]
    assert executions(world)["big_result"] == 2


def test_a_side_effect_in_flight_whose_tool_was_removed_is_an_unknown_outcome_never_not_executed(
    store_url: str, world: Path, driver: str
) -> None:
    crashed = run_child("three_sends", store_url, RUN, world, "--driver", driver, crash_at="tool.after_execute:1")
    assert crashed.killed and executions(world)["send_email"] == 1
    resumed = run_child("three_sends", store_url, RUN, world, "--driver", driver, "--without", "send_email")
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr[-2000:]
    with open_store(store_url) as store:
        first = tool_results(store.load(RUN).messages)[0]
        (entry,) = [e for e in store.ledger_list(RUN) if e.call_id == "toolu_1"]
    assert first["is_error"] is True and "not executed" not in first["content"].lower(), first
    assert "unknown" in first["content"].lower() or "may have" in first["content"].lower(), first
    assert entry.status == "unknown", "the ledger does not stay pending forever"
    assert executions(world)["send_email"] == 1


def test_a_probe_that_finds_a_100_mb_result_gets_it_cut_and_the_run_finishes(
    sqlite_url: str, world: Path, driver: str
) -> None:
    crashed = run_child("three_sends", sqlite_url, RUN, world, "--driver", driver, crash_at="tool.after_execute:1")
    assert crashed.killed
    resumed = run_child("three_sends", sqlite_url, RUN, world, "--driver", driver, "--probe", "huge")
    assert resumed.outcome == {"status": "completed", "turns": 4}, resumed.stdout + resumed.stderr[-2000:]
    with open_store(sqlite_url) as store:
        first = tool_results(store.load(RUN).messages)[0]
    assert len(first["content"]) < 5 * 1024 * 1024
    assert executions(world)["send_email"] == 3


def test_duplicate_ids_in_one_turn_without_a_probe_never_hand_one_call_the_others_result(
    sqlite_url: str, world: Path, driver: str
) -> None:
    crashed = run_child("dup_ids", sqlite_url, RUN, world, "--driver", driver, crash_at="tool.after_execute:1")
    assert crashed.killed
    resumed = run_child("dup_ids", sqlite_url, RUN, world, "--driver", driver)
    assert resumed.outcome == {"status": "completed", "turns": 2}, resumed.stdout + resumed.stderr[-2000:]
    sent = Counter(line["to"] for line in journal(world))
    assert set(sent.values()) == {1}, sent
    with open_store(sqlite_url) as store:
        state = store.load(RUN)
        entries = store.ledger_list(RUN)
    calls = [b for m in state.messages if m["role"] == "assistant" for b in m["content"] if b["type"] == "tool_use"]
    answers = tool_results(state.messages)
    assert [c["input"]["to"] for c in calls] == ["x@example.com", "y@example.com"]
    assert len(answers) == 2
    for call, answer in zip(calls, answers, strict=True):
        to = call["input"]["to"]
        # Its own result, or an honest unknown (in flight when killed: under arun both were).
        assert answer["content"] == f"sent to {to}" or answer["content"].startswith("UNKNOWN OUTCOME"), answer
        if answer["content"] == f"sent to {to}":
            assert sent[to] == 1
    unknown = sum(a["content"].startswith("UNKNOWN OUTCOME") for a in answers)
    assert unknown == sum(e.status == "unknown" for e in entries) >= 1


def test_past_the_attempt_cap_a_probe_that_proves_the_send_never_happened_is_believed(
    sqlite_url: str, world: Path, driver: str
) -> None:
    # Five processes die after the email's intent was saved but before the tool ever ran. That
    # looks exactly like a tool that kills its process in its first instruction, so the call is
    # not run again past the cap; but its probe proves it never happened, so the model is told
    # it was not done (not "unknown"), and the rest of the run goes on.
    for _ in range(5):
        child = run_child(
            "three_sends", sqlite_url, RUN, world, "--driver", driver, "--probe", crash_at="tool.before_execute:1"
        )
        assert child.killed, child.stderr[-2000:]
    assert executions(world)["send_email"] == 0
    finished = run_child("three_sends", sqlite_url, RUN, world, "--driver", driver, "--probe")
    assert finished.returncode == 0, finished.stderr[-2000:]
    with open_store(sqlite_url) as store:
        first = tool_results(store.load(RUN).messages)[0]
        (entry,) = [e for e in store.ledger_list(RUN) if e.status not in ("succeeded",)]
    assert first["content"].startswith("NOT DONE: the call to send_email"), first
    assert "never took effect" in first["content"] and first.get("is_error") is True, first
    assert entry.status == "failed", entry
    assert Counter(line["to"] for line in journal(world)) == {"b@example.com": 1, "c@example.com": 1}


def test_past_the_attempt_cap_a_probe_that_finds_the_send_gives_its_result(
    sqlite_url: str, world: Path, driver: str
) -> None:
    # Two kills before the tool starts, then the third attempt sends and dies before its result
    # is saved: the fourth process is past the cap, asks the probe, and uses what it found.
    for point in ["tool.before_execute:1", "tool.before_execute:1", "tool.after_execute:1"]:
        child = run_child("three_sends", sqlite_url, RUN, world, "--driver", driver, "--probe", crash_at=point)
        assert child.killed, child.stderr[-2000:]
    assert executions(world)["send_email"] == 1
    finished = run_child("three_sends", sqlite_url, RUN, world, "--driver", driver, "--probe")
    assert finished.returncode == 0, finished.stderr[-2000:]
    with open_store(sqlite_url) as store:
        first = tool_results(store.load(RUN).messages)[0]
    assert first["content"] == "sent to a@example.com", first
    assert Counter(line["to"] for line in journal(world)) == {
        "a@example.com": 1,
        "b@example.com": 1,
        "c@example.com": 1,
    }
