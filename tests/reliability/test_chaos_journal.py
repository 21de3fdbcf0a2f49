"""The chaos journal and what it lets chaos infer: every execution is on record before the tool
acts (even one a SIGKILL cuts short), and the repeat rules of ``_repeats`` say what a repeat of
each declared class means."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

from unbroken import ToolCall, tool
from unbroken.testing.chaos._journal import Journal, args_hash, read_journal
from unbroken.testing.chaos._repeats import Call, Execution, calls_of, judge


def _call(call_id: str = "toolu_1", key: str = "ub_key_1", **arguments: Any) -> ToolCall:
    return ToolCall(call_id, "t", dict(arguments), key)


def test_a_start_line_is_on_disk_before_the_tool_acts_even_when_the_tool_is_killed(tmp_path: Path) -> None:
    @tool(effect="side_effect")
    def die_midway(amount: int) -> str:
        """Dies while acting."""
        os.kill(os.getpid(), signal.SIGKILL)
        return "never"

    journal = Journal(tmp_path, "run-1", "sync")
    wrapped = journal.wrap(die_midway)
    pid = os.fork()
    if pid == 0:  # the child runs the tool and dies inside it
        try:
            wrapped.fn(call=_call(amount=5), amount=5)
        finally:
            os._exit(3)
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
    lines = read_journal(tmp_path)
    assert [line["at"] for line in lines] == ["start"]
    start = lines[0]
    assert (start["tool"], start["effect"], start["run_id"], start["call_id"], start["key"]) == (
        "die_midway",
        "side_effect",
        "run-1",
        "toolu_1",
        "ub_key_1",
    )
    assert start["args"] == args_hash({"amount": 5}) and start["pid"] == pid


def test_the_finish_line_says_whether_the_run_directory_changed_and_whether_the_key_was_read(
    tmp_path: Path,
) -> None:
    @tool(effect="read_only")
    def writes(note: str) -> str:
        """Writes a file although declared read-only."""
        (tmp_path / "outbox").write_text(note)
        return "ok"

    @tool(effect="idempotent")
    def reads_key(note: str, *, call: ToolCall) -> str:
        """Reads the key and changes nothing."""
        return call.idempotency_key

    journal = Journal(tmp_path, "run-1", "sync")
    journal.wrap(writes).fn(call=_call(note="hi"), note="hi")
    journal.wrap(reads_key).fn(call=_call("toolu_2", "ub_key_2", note="x"), note="x")
    finishes = [line for line in read_journal(tmp_path) if line["at"] == "finish"]
    assert [(f["tool"], f["changed"], f["key_read"]) for f in finishes] == [
        ("writes", True, False),
        ("reads_key", False, True),
    ]
    assert json.loads((tmp_path / ".chaos" / "journal.jsonl").read_text().splitlines()[0])["at"] == "start"


def test_what_a_tool_writes_under_a_dot_name_at_the_top_of_the_directory_is_not_a_change(tmp_path: Path) -> None:
    @tool(effect="read_only")
    def logs_its_reads(order_id: str) -> str:
        """Reads an order; the fake service keeps an access log."""
        (tmp_path / ".access").mkdir(exist_ok=True)
        with open(tmp_path / ".access" / "log", "a") as log:
            log.write(order_id + "\n")
        return "order"

    Journal(tmp_path, "run-1", "sync").wrap(logs_its_reads).fn(call=_call(order_id="42"), order_id="42")
    assert [line["changed"] for line in read_journal(tmp_path) if line["at"] == "finish"] == [False]


def test_arguments_hash_the_same_whatever_their_key_order() -> None:
    assert args_hash({"a": 1, "b": [1, 2]}) == args_hash({"b": [1, 2], "a": 1}) != args_hash({"a": 2, "b": [1, 2]})


def _with(effect: str, *executions: Execution) -> Call:
    return Call("w", "run-1", "toolu_1", "ub_key_1", "t", effect, list(executions))


def _done(changed: bool | None = False, key_read: bool = False, args: str = "h") -> Execution:
    return Execution(1, args, finished=True, changed=changed, key_read=key_read)


def _cut_short(args: str = "h") -> Execution:
    return Execution(1, args)


def test_a_side_effect_started_again_after_it_finished_is_a_violation() -> None:
    violations, _ = judge(_with("side_effect", _done(), _done()))
    assert [v.invariant for v in violations] == ["side effect at most once"]


def test_a_side_effect_rerun_after_an_execution_a_kill_cut_short_is_not_judged() -> None:
    assert judge(_with("side_effect", _cut_short(), _done())) == ([], [])


def test_a_read_only_tool_that_changed_the_directory_and_ran_twice_is_a_violation() -> None:
    violations, _ = judge(_with("read_only", _done(changed=True), _done(changed=True)))
    assert [v.invariant for v in violations] == ["side effect at most once"]
    assert "declared read_only" in violations[0].detail


def test_a_read_only_tool_that_changed_the_directory_once_is_a_warning() -> None:
    violations, warnings = judge(_with("read_only", _done(changed=True)))
    assert violations == [] and [w.invariant for w in warnings] == ["read_only tools change nothing"]


def test_a_read_only_tool_rerun_without_changing_anything_is_fine() -> None:
    assert judge(_with("read_only", _done(), _done(), _done(changed=None))) == ([], [])


def test_an_idempotent_tool_rerun_under_one_key_that_never_read_it_is_a_warning() -> None:
    violations, warnings = judge(_with("idempotent", _done(), _done()))
    assert violations == [] and "never read call.idempotency_key" in warnings[0].detail


def test_an_idempotent_tool_whose_reruns_each_changed_the_directory_is_a_violation_even_if_it_read_the_key() -> None:
    violations, warnings = judge(
        _with("idempotent", _done(changed=True, key_read=True), _done(changed=True, key_read=True))
    )
    assert warnings == [] and "changed on 2 of its executions" in violations[0].detail


def test_an_idempotent_tool_that_read_the_key_and_applied_it_once_is_fine() -> None:
    assert judge(_with("idempotent", _done(changed=True, key_read=True), _done(key_read=True))) == ([], [])


def test_one_key_with_two_different_arguments_is_a_violation() -> None:
    violations, _ = judge(_with("read_only", _done(args="a"), _done(args="b")))
    assert [v.invariant for v in violations] == ["one key, one call"]


def test_executions_are_grouped_per_run_and_key_and_paired_with_their_finish_by_process() -> None:
    def line(at: str, pid: int, key: str = "k1", **extra: Any) -> dict[str, Any]:
        base = {"at": at, "run_id": "r", "call_id": "c", "key": key, "tool": "t", "effect": "side_effect"}
        return {**base, "args": "h", "pid": pid, **extra}

    lines = [line("start", 10), line("start", 11), line("finish", 11, changed=True), line("start", 12, key="k2")]
    calls = calls_of("w", lines)
    assert [(c.key, [(e.pid, e.finished, e.changed) for e in c.executions]) for c in calls] == [
        ("k1", [(10, False, None), (11, True, True)]),
        ("k2", [(12, False, None)]),
    ]
