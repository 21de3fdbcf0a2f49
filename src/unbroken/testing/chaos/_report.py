"""What a sweep found: the broken invariants, the warnings, the repeated tool calls, the counts."""

from __future__ import annotations

from dataclasses import dataclass, field

from ._repeats import Call, Finding, ToolRepeats


@dataclass(frozen=True)
class Violation:
    """One broken invariant: where (``target``), which rule, and what was seen."""

    target: str
    invariant: str
    detail: str


@dataclass
class PointStats:
    """What happened at one crash point (or ``random`` for outside kills)."""

    label: str
    hits: int = 0
    runs: int = 0
    kills: int = 0
    resumes: int = 0
    unknown_results: int = 0
    violations: int = 0


@dataclass
class ChaosReport:
    """The outcome of a sweep. ``ok`` when no invariant was broken (warnings do not count)."""

    store_kind: str
    mode: str
    points: dict[str, PointStats] = field(default_factory=dict)
    violations: list[Violation] = field(default_factory=list)
    warnings: list[Violation] = field(default_factory=list)
    """Repeats that look like a side effect ran again, where chaos cannot be sure (see ``_repeats``)."""
    tools: dict[str, ToolRepeats] = field(default_factory=dict)
    """Per tool: its calls, and those executed more than once (in any process of the sweep)."""
    runs: int = 0
    kills: int = 0
    resumes: int = 0
    loads: int = 0
    corrupt_loads: int = 0
    double_effects: int = 0
    recoveries_compared: int = 0
    unknown_results: int = 0
    capped_results: int = 0
    """Calls the engine settled without running them again after they crashed their process
    ``Agent.max_attempts`` times (honest when the run died that often)."""
    checks: int = 0
    """How many times the user's check ran (once per finished run)."""
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.violations

    def repeated_calls(self, tool: str) -> list[Call]:
        """The calls of ``tool`` executed more than once."""
        stats = self.tools.get(tool)
        return list(stats.repeated) if stats else []

    def add_finding(self, finding: Finding, *, warning: bool) -> None:
        violation = Violation(finding.world, finding.invariant, finding.detail)
        (self.warnings if warning else self.violations).append(violation)

    def merge(self, other: ChaosReport) -> None:
        for label, stats in other.points.items():
            mine = self.points.setdefault(label, PointStats(label, stats.hits))
            mine.runs += stats.runs
            mine.kills += stats.kills
            mine.resumes += stats.resumes
            mine.unknown_results += stats.unknown_results
            mine.violations += stats.violations
        for name, tool in other.tools.items():
            ours = self.tools.setdefault(name, ToolRepeats(name, tool.effect))
            ours.calls += tool.calls
            ours.most = max(ours.most, tool.most)
            ours.repeated += tool.repeated
        self.violations += other.violations
        self.warnings += other.warnings
        for name in (
            "runs",
            "kills",
            "resumes",
            "loads",
            "corrupt_loads",
            "double_effects",
            "recoveries_compared",
            "unknown_results",
            "capped_results",
            "checks",
        ):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.seconds += other.seconds
        if other.mode not in self.mode:
            self.mode = f"{self.mode}; {other.mode}"
