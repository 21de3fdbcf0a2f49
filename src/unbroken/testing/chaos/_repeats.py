"""Which tool calls ran more than once, and which of those repeats repeated a side effect.

A call is one idempotency key of one run. From the journal (``_journal``) each call has a list
of executions: started, finished or cut short by a kill, whether the run's directory changed
while it ran, whether the tool read the key. What chaos can tell from that:

* ``side_effect`` tool started again after an execution of the same call finished: the effect
  ran twice. A violation. (Started again after an execution that a kill cut short: the
  engine's probe said "not executed"; listed, not judged.)
* ``read_only`` tool whose execution changed the run's directory: it is not read-only. Run
  more than once for one call, that is a repeated side effect: a violation. Seen only once:
  a warning (a crash at the wrong moment would repeat it).
* ``idempotent`` tool run more than once under one key: a violation when two of its
  executions changed the directory (the effect was applied again); a warning when it only
  never read the key (it cannot be deduplicating by it), with that evidence.

What it cannot tell: effects outside the run's directory (a real service, a network call),
changes made while another tool ran at the same time, and whether a tool is idempotent by
nature (setting a value twice) rather than by key. A user check (``--check``) covers the rest.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

DIRECTORY = "$UNBROKEN_CHAOS_DIR"


@dataclass
class Execution:
    """One execution of a call, as the journal saw it."""

    pid: int
    args: str
    finished: bool = False
    changed: bool | None = None
    key_read: bool = False


@dataclass
class Call:
    """One tool call (one idempotency key of one run) and every execution of it."""

    world: str
    run_id: str
    call_id: str
    key: str
    tool: str
    effect: str
    executions: list[Execution] = field(default_factory=list)

    def describe(self) -> str:
        finished = sum(e.finished for e in self.executions)
        runs = len(self.executions)
        times = "once" if runs == 1 else f"{runs} times"
        return f"call {self.call_id} (key {self.key[:16]}..., run {self.run_id}) ran {times} ({finished} finished)"

    @property
    def rerun_after_finish(self) -> bool:
        return any(e.finished for e in self.executions[:-1])

    @property
    def changes(self) -> int:
        return sum(e.changed is True for e in self.executions)


@dataclass
class Finding:
    """A repeat (or a declared class) that looks wrong: a violation or a warning, with evidence."""

    world: str
    tool: str
    invariant: str
    detail: str


@dataclass
class ToolRepeats:
    """Per tool: how many calls it executed, and the calls executed more than once."""

    tool: str
    effect: str
    calls: int = 0
    repeated: list[Call] = field(default_factory=list)
    most: int = 0


def calls_of(world: str, lines: Iterable[dict[str, Any]]) -> list[Call]:
    """The calls in a journal, each with its executions in order."""
    calls: dict[tuple[str, str], Call] = {}
    open_runs: dict[tuple[str, str, int], Execution] = {}
    for line in lines:
        ident = (line["run_id"], line["key"])
        call = calls.get(ident)
        if call is None:
            call = calls[ident] = Call(
                world, line["run_id"], line["call_id"], line["key"], line["tool"], line["effect"]
            )
        if line["at"] == "start":
            execution = Execution(line["pid"], line["args"])
            call.executions.append(execution)
            open_runs[(*ident, line["pid"])] = execution
        elif (execution_ := open_runs.pop((*ident, line["pid"]), None)) is not None:
            execution_.finished = True
            execution_.changed = line.get("changed")
            execution_.key_read = bool(line.get("key_read"))
    return list(calls.values())


def judge(call: Call) -> tuple[list[Finding], list[Finding]]:
    """The violations and the warnings one call's executions show."""
    violations: list[Finding] = []
    warnings: list[Finding] = []
    runs = len(call.executions)
    if len({e.args for e in call.executions}) > 1:
        violations.append(
            Finding(call.world, call.tool, "one key, one call", f"{call.describe()} with different arguments")
        )
    if call.effect == "side_effect" and call.rerun_after_finish:
        violations.append(
            Finding(
                call.world,
                call.tool,
                "side effect at most once",
                f"{call.tool} {call.describe()}: it ran again after an execution had finished",
            )
        )
    elif call.effect == "read_only" and call.changes:
        text = f"{call.tool} is declared read_only but changed {DIRECTORY} while it ran; {call.describe()}"
        if runs > 1:
            violations.append(Finding(call.world, call.tool, "side effect at most once", text))
        else:
            warnings.append(Finding(call.world, call.tool, "read_only tools change nothing", text))
    elif call.effect == "idempotent" and runs > 1:
        finished = [e for e in call.executions if e.finished]
        ignored = bool(finished) and not any(e.key_read for e in finished)
        ignored_note = " (and it never read call.idempotency_key)" if ignored else ""
        if call.changes > 1:
            # The effect was applied again under one key: the same repeat as a side effect's.
            violations.append(
                Finding(
                    call.world,
                    call.tool,
                    "idempotent tools apply a key once",
                    f"{call.tool} {call.describe()} under one key, and {DIRECTORY} changed on "
                    f"{call.changes} of its executions{ignored_note}",
                )
            )
        elif ignored:
            warnings.append(
                Finding(
                    call.world,
                    call.tool,
                    "idempotent tools apply a key once",
                    f"{call.tool} {call.describe()} under one key, and it never read call.idempotency_key",
                )
            )
    return violations, warnings


def tally(per_tool: dict[str, ToolRepeats], calls: Iterable[Call]) -> None:
    """Count each tool's calls and keep those executed more than once."""
    for call in calls:
        stats = per_tool.setdefault(call.tool, ToolRepeats(call.tool, call.effect))
        stats.calls += 1
        stats.most = max(stats.most, len(call.executions))
        if len(call.executions) > 1:
            stats.repeated.append(call)
