"""Proof by crash: SIGKILL a real agent process in each window around a tool call, for each
tool class, on each store; resume in a fresh process; count what the outside world saw.

The child runs the ``matrix`` script of ``crash_driver``: one turn that calls read_file
(read_only), put_object (idempotent) and send_email (side_effect, with or without a probe on
the outbox), a second turn that sends another email, then a final answer. The windows:

* ``before_intent``: nothing about the call is durable yet (read-only calls record no intent:
  right after save point A);
* ``after_intent``: the ledger says ``pending``; the tool has not run;
* ``after_execute``: the tool ran; its outcome is not saved;
* ``after_outcome``: the outcome and the tool_result are saved (one atomic write);
* ``outcome_not_checkpointed`` (file store only, where the ledger entry and the save record
  are two files): the ledger holds the outcome, the run's save record does not.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from crash_checks import history_problems, is_unknown, run_child, tool_results
from crash_driver import CALLS, SCRIPTS
from crash_service import CountingService

from unbroken import ScriptedModel, open_store
from unbroken.codec import loads

TARGETS = ("read_only", "idempotent", "side_effect", "side_effect+probe")
WINDOWS = ("before_intent", "after_intent", "after_execute", "after_outcome", "outcome_not_checkpointed")
# Order of the turn-1 calls at each crash point: tool.* sees read, put, mail; ledger.* sees put, mail.
TOOL_N = {"read_only": 1, "idempotent": 2, "side_effect": 3}
LEDGER_N = {"idempotent": 1, "side_effect": 2}


def crash_spec(tool_class: str, window: str) -> tuple[str | None, str | None]:
    """(UNBROKEN_CRASH_AT, --kill-after) for the window, or (None, None) where it does not exist."""
    if window == "outcome_not_checkpointed":
        if tool_class == "read_only":
            return None, None  # a read-only call has no ledger entry
        # The save that follows the tool writes its ledger file first: die once that is renamed in.
        return None, f"tool.after_execute:{TOOL_N[tool_class]}>file.after_rename:1"
    if tool_class == "read_only":
        return {
            "before_intent": "save.model_turn.after:1",
            "after_intent": "tool.before_execute:1",
            "after_execute": "tool.after_execute:1",
            "after_outcome": "tool.after_outcome:1",
        }[window], None
    return {
        "before_intent": f"ledger.before_intent:{LEDGER_N[tool_class]}",
        "after_intent": f"ledger.after_intent:{LEDGER_N[tool_class]}",
        "after_execute": f"tool.after_execute:{TOOL_N[tool_class]}",
        "after_outcome": f"tool.after_outcome:{TOOL_N[tool_class]}",
    }[window], None


def windows_of(store_kind: str) -> tuple[str, ...]:
    return WINDOWS if store_kind == "file" else WINDOWS[:-1]


@dataclass
class Figures:
    scenarios: int = 0
    duplicates: int = 0
    lost_results: int = 0
    ambiguous: int = 0
    ambiguous_surfaced: int = 0
    invalid_histories: int = 0
    problems: list[str] = field(default_factory=list)

    def line(self, store_kind: str) -> str:
        return (
            f"[crash windows] store={store_kind}: {self.scenarios} SIGKILLs resumed; "
            f"{self.duplicates} duplicate executions of side-effecting/idempotent calls; "
            f"{self.lost_results} lost tool results; "
            f"{self.ambiguous_surfaced}/{self.ambiguous} truly ambiguous calls surfaced as unknown; "
            f"{self.invalid_histories} provider-invalid histories"
        )


def truth(service: CountingService, keys: Mapping[str, str], call_id: str) -> str | None:
    """What the outside world says the call returned, or None if it never took effect."""
    key = keys.get(call_id)
    if call_id == "toolu_read":
        return "contents of orders.csv" if service.requests("read") else None
    if call_id == "toolu_put":
        first = next((r for r in service.rows() if r["endpoint"] == "put" and r["key"] == key and r["applied"]), None)
        return None if first is None else f"stored report.txt (version {first['n']})"
    return service.find_sent(key)


def judge(
    figures: Figures,
    name: str,
    tool_class: str,
    window: str,
    probe: bool,
    service: CountingService,
    run_id: str,
    url: str,
) -> None:
    """Add one resumed scenario's counts to ``figures`` and note any broken expectation."""

    def problem(text: str) -> None:
        figures.problems.append(f"{name}: {text}")

    store = open_store(url)
    try:
        state = store.load(run_id)
        ledger = {entry.call_id: entry for entry in store.ledger_list(run_id)}
        keys = {call_id: entry.key for call_id, entry in ledger.items()}
    finally:
        store.close()
    if state.phase != "completed":
        problem(f"run ended {state.phase}")
    figures.scenarios += 1

    # Duplicates: count effects per logical call (its body), so a changed key would show too.
    for endpoint in ("put", "send"):
        bodies: dict[str, int] = {}
        for row in service.rows():
            if row["endpoint"] == endpoint and row["applied"]:
                bodies[row["body"]] = bodies.get(row["body"], 0) + 1
        figures.duplicates += sum(count - 1 for count in bodies.values())
    put_keys = {r["key"] for r in service.rows() if r["endpoint"] == "put"}
    if put_keys - {keys["toolu_put"]}:
        problem(f"put_object was called with another key: {put_keys}")

    # Histories and results.
    model = ScriptedModel(SCRIPTS["matrix"])
    invalid = history_problems(state.messages) + model.dangling_call_ids(state.messages)
    if invalid:
        figures.invalid_histories += 1
        problem(f"invalid history: {invalid}")
    answers = tool_results(state.messages)
    for call_id in ("toolu_read", "toolu_put", "toolu_mail", "toolu_mail2"):
        blocks = answers.get(call_id, [])
        if len(blocks) != 1:
            figures.lost_results += 1
            continue
        block: Mapping[str, Any] = blocks[0]
        if is_unknown(block):
            continue  # counted below: honest, not lost
        if block["content"] != truth(service, keys, call_id):
            figures.lost_results += 1
            problem(f"{call_id} answered {block['content']!r}, the world says {truth(service, keys, call_id)!r}")

    target = CALLS["matrix"][tool_class]
    target_block = answers.get(target, [{}])[0]
    surfaced = is_unknown(target_block) and ledger.get(target) is not None and ledger[target].status == "unknown"
    if tool_class == "side_effect" and not probe and window == "after_execute":
        figures.ambiguous += 1
        figures.ambiguous_surfaced += surfaced

    # What each window must lead to, beyond the figures.
    sends = service.effects("send")
    mail_key = keys["toolu_mail"]
    if sends[keys["toolu_mail2"]] != 1:
        problem("the second email was not sent exactly once")
    no_probe_in_doubt = tool_class == "side_effect" and not probe and window in ("after_intent", "after_execute")
    if no_probe_in_doubt != surfaced:
        problem(f"target answered {target_block.get('content')!r}; unknown expected: {no_probe_in_doubt}")
    if tool_class == "side_effect":
        expected_emails = 0 if (not probe and window == "after_intent") else 1
        if sends[mail_key] != expected_emails:
            problem(f"customer got {sends[mail_key]} emails, expected {expected_emails}")
    if tool_class == "idempotent":
        put_requests = service.requests("put")[keys["toolu_put"]]
        expected_requests = 2 if window == "after_execute" else 1
        if put_requests != expected_requests:
            problem(f"put_object requested {put_requests} times, expected {expected_requests}")
    if tool_class == "read_only":
        reads = service.requests("read")[None]
        expected_reads = 2 if window == "after_execute" else 1
        if reads != expected_reads:
            problem(f"read_file ran {reads} times, expected {expected_reads}")


def test_no_crash_window_duplicates_loses_or_hides_a_call(
    store_kind: str, store_url: str, service: CountingService, run_id: str, sweep_driver: str
) -> None:
    sweep(store_kind, store_url, service, run_id, sweep_driver)


def test_a_process_writing_schema_1_crashed_in_any_window_is_resumed_at_schema_2(
    tmp_path: Path, service: CountingService, run_id: str
) -> None:
    """An old run (checkpoint schema 1) crashed by an old process and resumed by today's: the
    records of the two schemas are read side by side, with the same guarantees."""
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    sweep("sqlite", url, service, run_id, "sync", crash_args=["--schema", "1"])
    store = open_store(url)
    try:
        versions = {loads(record.body)["v"] for name in store.list_runs() for record in store.read_records(name.run_id)}
    finally:
        store.close()
    assert versions == {1, 2}


def sweep(
    store_kind: str,
    store_url: str,
    service: CountingService,
    run_id: str,
    driver: str,
    crash_args: Sequence[str] = (),
) -> None:
    figures = Figures()
    for target in TARGETS:
        tool_class, probe = target.removesuffix("+probe"), target.endswith("+probe")
        for window in windows_of(store_kind):
            crash_at, kill_after = crash_spec(tool_class, window)
            if crash_at is None and kill_after is None:
                continue
            name = f"{target}/{window}"
            scenario_run = f"{run_id}-{target.replace('+', '-')}-{window}"
            scenario_service = CountingService(service.path.with_name(f"{scenario_run}.jsonl"))
            args = ["agent", "--store", store_url, "--run-id", scenario_run, "--service", str(scenario_service.path)]
            args += ["--driver", driver]
            args += ["--probe"] if probe else []
            crashing = [*args, *crash_args]
            crashed = run_child([*crashing, "--kill-after", kill_after] if kill_after else crashing, crash_at=crash_at)
            if not crashed.killed:
                figures.problems.append(f"{name}: the child was not killed ({crashed.returncode}): {crashed.stderr}")
                continue
            resumed = run_child(args)
            if resumed.returncode != 0:
                figures.problems.append(f"{name}: resume failed ({resumed.returncode}): {resumed.stderr[-2000:]}")
                continue
            judge(figures, name, tool_class, window, probe, scenario_service, scenario_run, store_url)
    print("\n" + figures.line(f"{store_kind} driver={driver}"))
    assert figures.problems == []
    assert figures.scenarios == 16 + (3 if store_kind == "file" else 0)
    assert (figures.duplicates, figures.lost_results, figures.invalid_histories) == (0, 0, 0)
    assert figures.ambiguous == 1
    assert figures.ambiguous_surfaced == figures.ambiguous
