"""A schedule: the list of things that happen to a simulated world, drawn from one seed.

Every action is plain data with a one-line text form, so a failing schedule can be printed,
shrunk (actions dropped while it still fails) and replayed from its text. An action that does
not apply when its turn comes (stepping a dead process, thawing one that is not frozen) does
nothing, which is what lets the shrinker drop any action.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Literal, get_args

from ...errors import ConfigError

Kind = Literal[
    "step",
    "advance",
    "freeze",
    "freeze_at",
    "thaw",
    "kill",
    "restart",
    "crash_at",
    "fault",
    "clock",
    "lose_reply",
    "lose",
    "evict",
    "move",
    "reuse",
]
KINDS: tuple[str, ...] = get_args(Kind)
POINTS = ("step", "in_tool", "after_tool")
"""The driver's scheduling points (``process.SimProcess._drive``) a process can be frozen at."""

PRIMITIVES = (
    "read_head",
    "swap_head",
    "write_record",
    "records_after",
    "insert_entry",
    "put_entry",
    "get_entry",
)
"""The store primitives a fault can be armed on (the ones a run's steps call)."""
FAULTS = ("error", "lost_reply", "delay", "delay_after", "torn", "late")
"""``error``: refused before reaching the store. ``lost_reply``: applied, then the reply is lost.
``delay``/``delay_after``: the call takes long (before/after it applies) and the next actions
of the schedule happen meanwhile. ``torn``: a record write that leaves only its ledger entries
(what A2 allows a crash to leave). ``late`` (on ``swap_head`` only): the process is killed with
its lease write in flight, and the store applies the write after its death."""
CRASH_POINTS = (
    "save.",
    "save.model_turn.",
    "save.tool_result.",
    "save.tools_done.",
    "ledger.before_intent",
    "ledger.after_intent",
    "tool.before_execute",
    "tool.after_execute",
    "tool.after_outcome",
    "model.before_call",
)
"""Crash-point label prefixes (``unbroken.crashpoints``) a process can be killed at."""
ADVANCES = (0.5, 4.0, 11.0, 31.0, 65.0)
SERVICES = ("payments", "mail", "charges", "warehouse")


@dataclass(frozen=True)
class Action:
    """One thing that happens: ``kind`` to ``process`` with a number and a detail."""

    kind: Kind
    process: int = 0
    number: float = 0.0
    detail: str = ""

    def __str__(self) -> str:
        parts = [self.kind, f"p{self.process}"]
        if self.number:
            parts.append(f"{self.number:g}")
        if self.detail:
            parts.append(self.detail)
        return " ".join(parts)

    @classmethod
    def parse(cls, line: str) -> Action:
        """Read an action back from its text (``str(action)``)."""
        words = line.split()
        if len(words) < 2 or words[0] not in KINDS or not words[1].startswith("p") or not words[1][1:].isdigit():
            raise ConfigError(f"not a schedule action: {line!r} (expected 'KIND pN [NUMBER] [DETAIL]')")
        number, detail = 0.0, ""
        for word in words[2:]:
            try:
                number = float(word)
            except ValueError:
                detail = word
        return cls(words[0], int(words[1][1:]), number, detail)  # type: ignore[arg-type]


def to_text(actions: list[Action]) -> str:
    return "\n".join(str(action) for action in actions)


def from_text(text: str) -> list[Action]:
    """A schedule from its text: one action per line; blank lines and ``#`` comments ignored."""
    return [Action.parse(line) for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def draw(rng: random.Random, processes: int, length: int) -> list[Action]:
    """About ``length`` actions drawn from ``rng``, as a sequence of episodes (a process runs on;
    one freezes while time passes and another takes over; a crash; a flaky store call with other
    processes moving meanwhile; a clock step; a lost reply). Each seed favours some episodes and
    leaves others out (swarm testing: fewer kinds of fault per schedule go deeper)."""
    episodes = [
        (_run_on, 5),
        (_zombie, 4),
        (_crash, 2),
        (_flaky_store, 3),
        (_clock_step, 1),
        (_lost_reply, 1),
        (_time_passes, 1),
        (_store_loses, 1),
        (_record_moves, 1),
    ]
    names = [episode for episode, _ in episodes]
    weights = [weight * rng.choice((0, 1, 1, 3)) for _, weight in episodes]
    weights[0] = max(weights[0], 2)
    faults = [fault for fault in FAULTS if rng.random() < 0.6] or list(FAULTS)
    actions: list[Action] = []
    while len(actions) < length:
        episode = rng.choices(names, weights)[0]
        actions += episode(rng, processes, faults)
    return actions


def _steps(rng: random.Random, process: int) -> Action:
    return Action("step", process, float(rng.choice((1, 1, 2, 3, 5, 8))))


def _other(rng: random.Random, processes: int, process: int) -> int:
    return (process + rng.randrange(1, processes)) % processes if processes > 1 else process


def _run_on(rng: random.Random, processes: int, faults: list[str]) -> list[Action]:
    return [_steps(rng, rng.randrange(processes))]


def _zombie(rng: random.Random, processes: int, faults: list[str]) -> list[Action]:
    """A process freezes at a point, time passes, another one moves, the first one wakes."""
    process = rng.randrange(processes)
    other = _other(rng, processes, process)
    point = rng.choice(("step", "step", "in_tool", "in_tool", "after_tool"))
    actions = [Action("freeze_at", process, 0.0, point), _steps(rng, process)]
    if rng.random() < 0.3:
        actions.append(Action("freeze", process))
    actions.append(Action("advance", process, rng.choice((31.0, 31.0, 45.0, 65.0))))
    actions += [Action("step", other, float(rng.randint(3, 8))) for _ in range(rng.randint(1, 4))]
    actions += [Action("thaw", process), _steps(rng, process)]
    return actions


def _crash(rng: random.Random, processes: int, faults: list[str]) -> list[Action]:
    process = rng.randrange(processes)
    if rng.random() < 0.3:
        killed = [_steps(rng, process), Action("kill", process)]
    else:
        point = rng.choice(CRASH_POINTS)
        killed = [Action("crash_at", process, float(rng.randint(1, 3)), point), _steps(rng, process)]
    return [*killed, _steps(rng, _other(rng, processes, process)), Action("restart", process)]


def _flaky_store(rng: random.Random, processes: int, faults: list[str]) -> list[Action]:
    """A store call fails, tears, loses its reply or is slow while the others move."""
    process = rng.randrange(processes)
    fault = rng.choice(faults)
    if fault == "late":
        return _late_lease_write(rng, processes, process)
    primitive = "write_record" if fault == "torn" else rng.choice(PRIMITIVES)
    count = rng.randint(1, 4)
    actions = [Action("fault", process, float(count), f"{primitive}:{fault}"), _steps(rng, process)]
    if fault.startswith("delay"):  # the delayed process moves first; the others move during its call
        meanwhile = [_steps(rng, _other(rng, processes, process)) for _ in range(count)]
        if rng.random() < 0.3:
            meanwhile[0] = Action("advance", process, rng.choice((11.0, 31.0)))
        actions += meanwhile
    return actions


def _late_lease_write(rng: random.Random, processes: int, process: int) -> list[Action]:
    """``process`` is killed taking a lease, its write landing a second or a few later; another
    process moves meanwhile (its head read slow at times, so the write lands during it), and the
    dead one restarts."""
    landing = rng.choice((1.0, 1.0, 5.0))  # seconds after the death
    actions = [Action("fault", process, landing, "swap_head:late"), _steps(rng, process)]
    other = _other(rng, processes, process)
    if rng.random() < 0.9:
        actions.append(Action("fault", other, 1.0, "read_head:delay_after"))
    actions += [_steps(rng, other), Action("restart", process)]
    return actions


def _clock_step(rng: random.Random, processes: int, faults: list[str]) -> list[Action]:
    return [Action("clock", rng.randrange(processes), rng.choice((-3600.0, -40.0, 40.0, 3600.0)))]


def _lost_reply(rng: random.Random, processes: int, faults: list[str]) -> list[Action]:
    process = rng.randrange(processes)
    return [Action("lose_reply", process, 0.0, rng.choice(SERVICES)), _steps(rng, process)]


def _time_passes(rng: random.Random, processes: int, faults: list[str]) -> list[Action]:
    return [Action("advance", rng.randrange(processes), rng.choice(ADVANCES))]


def _store_loses(rng: random.Random, processes: int, faults: list[str]) -> list[Action]:
    """The store service loses data, as a cache-like server may (only on a ``Forgetful`` store)."""
    process = rng.randrange(processes)
    if rng.random() < 0.5:
        loss = Action("evict", process, float(rng.randrange(64)))
    else:
        loss = Action("lose", process, 0.0, "everything" if rng.random() < 0.2 else "tail")
    return [_steps(rng, process), loss, _steps(rng, _other(rng, processes, process))]


def _record_moves(rng: random.Random, processes: int, faults: list[str]) -> list[Action]:
    """A stored record is copied over another place (``moves``: a store bug or a hand edit)."""
    process = rng.randrange(processes)
    move = Action("move", process, float(rng.randrange(64)), rng.choice(("seq", "run")))
    return [_steps(rng, process), move, _steps(rng, _other(rng, processes, process))]
