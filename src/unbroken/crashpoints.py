"""Named crash points: places where a test (or ``unbroken chaos``) can kill the process.

Set ``UNBROKEN_CRASH_AT=label:n`` (several separated by commas; ``label`` may end with ``*``
to match a prefix) and the process SIGKILLs itself the n-th time it reaches a point whose
label matches. When nothing is armed, ``hit`` is one global lookup and a return.
"""

from __future__ import annotations

import os
from collections.abc import Callable

ENV_VAR = "UNBROKEN_CRASH_AT"

_targets: list[tuple[str, int]] | None = None
_counts: dict[str, int] = {}
_observer: Callable[[str], None] | None = None


def _parse(spec: str) -> list[tuple[str, int]]:
    targets = []
    for part in spec.split(","):
        part = part.strip()
        if not part:
            continue
        label, _, count = part.rpartition(":")
        if not label or not count.isdigit() or int(count) < 1:
            raise ValueError(f"{ENV_VAR}: {part!r} is not label:n with n >= 1")
        targets.append((label, int(count)))
    return targets


def arm(spec: str | None) -> None:
    """Arm (or with None, disarm) crash points in this process; resets the counters."""
    global _targets
    _targets = _parse(spec) if spec else None
    _counts.clear()


def observe(callback: Callable[[str], None] | None) -> None:
    """Call ``callback(label)`` at every point reached (used to list the points of a run)."""
    global _observer
    _observer = callback


def hit(label: str) -> None:
    """A crash point. Kills this process with SIGKILL if armed for this label and count."""
    if _targets is None and _observer is None:
        return
    if _observer is not None:
        _observer(label)
    if _targets is None:
        return
    for target, count in _targets:
        if target == label or (target.endswith("*") and label.startswith(target[:-1])):
            seen = _counts.get(target, 0) + 1
            _counts[target] = seen
            if seen == count:
                import signal  # (here: nothing imports it for a process that is never killed)

                os.kill(os.getpid(), signal.SIGKILL)


arm(os.environ.get(ENV_VAR))
