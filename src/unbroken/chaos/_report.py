"""What a sweep found: the broken invariants and the counts, per crash point and in total."""

from __future__ import annotations

from dataclasses import dataclass, field


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
    """The outcome of a sweep. ``ok`` when no invariant was broken."""

    store_kind: str
    mode: str
    points: dict[str, PointStats] = field(default_factory=dict)
    violations: list[Violation] = field(default_factory=list)
    runs: int = 0
    kills: int = 0
    resumes: int = 0
    loads: int = 0
    corrupt_loads: int = 0
    double_effects: int = 0
    recoveries_compared: int = 0
    unknown_results: int = 0
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.violations

    def merge(self, other: ChaosReport) -> None:
        for label, stats in other.points.items():
            mine = self.points.setdefault(label, PointStats(label, stats.hits))
            mine.runs += stats.runs
            mine.kills += stats.kills
            mine.resumes += stats.resumes
            mine.unknown_results += stats.unknown_results
            mine.violations += stats.violations
        self.violations += other.violations
        for name in ("runs", "kills", "resumes", "loads", "corrupt_loads", "double_effects", "recoveries_compared"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.unknown_results += other.unknown_results
        self.seconds += other.seconds
