"""Token counts and usage objects from a model, normalised before they reach the run state.

A provider's ``usage`` is kept as it reported it, with one rule (docs/format.md, "Usage"):
every number in it is a count, so an integer must be from 0 to 2**53-1 and a float finite and
in that range; a key named ``*tokens`` holds a number (or null). Anything else (a negative, a
string where a count belongs, 2**70, NaN, a non-JSON object, nesting deeper than
``MAX_USAGE_DEPTH``) is dropped from the usage and from the token count, a warning names it in
the log, and ``usage["unbroken_dropped"]`` counts the values dropped so far. So an odd answer
from a model never makes a run that saves but does not load (``acceptance.accept_fields``
would refuse such a save anyway: this keeps the run going instead).

``account_turn`` is the one place a turn's usage enters the state (``RunSession.record_turn``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from ._log import log
from .acceptance import MAX_COUNT
from .state import JSONValue

DROPPED = "unbroken_dropped"
"""The usage key counting values dropped by the rule above (summed over the run's turns)."""
MAX_USAGE_DEPTH = 8
"""Nesting in a usage object deeper than this is dropped (providers nest two or three levels)."""


def token_count(value: object) -> int | None:
    """``value`` as a token count (an int from 0 to 2**53-1, or a float with such an integer
    value), or None if it is not one (a bool, a negative, a string, 2**70, NaN...)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if 0 <= value <= MAX_COUNT else None
    if isinstance(value, float) and math.isfinite(value) and value.is_integer() and 0 <= value <= MAX_COUNT:
        return int(value)
    return None


def clean_usage(usage: object) -> tuple[dict[str, JSONValue], list[str]]:
    """The usage object with every value the rule refuses dropped, and a note (its JSON path and
    why) for each. ``None`` or no usage is ``{}`` without a note."""
    notes: list[str] = []
    if usage is None:
        return {}, notes
    if not isinstance(usage, Mapping):
        notes.append(f"usage: a {type(usage).__name__}, not an object")
        return {}, notes
    kept, cleaned = _clean("usage", usage, "usage", 1, notes)
    return cleaned if kept and isinstance(cleaned, dict) else {}, notes


def _clean(key: str, value: object, path: str, depth: int, notes: list[str]) -> tuple[bool, JSONValue]:
    """(False, None) with a note if ``value`` (under ``key``, at ``path``) is dropped, else
    (True, the value with what is dropped inside it taken out)."""
    why = _refused(key, value, depth)
    if why is not None:
        notes.append(f"{path}: {why}")
        return False, None
    if isinstance(value, Mapping):
        kept: dict[str, JSONValue] = {}
        for name, item in value.items():
            if type(name) is not str:
                notes.append(f"{path}[{name!r}]: a {type(name).__name__} key, not a string")
                continue
            keep, cleaned = _clean(name, item, f"{path}.{name}", depth + 1, notes)
            if keep:
                kept[name] = cleaned
        return True, kept
    if type(value) is list:
        items: list[JSONValue] = []
        for index, item in enumerate(value):
            keep, cleaned = _clean(key, item, f"{path}[{index}]", depth + 1, notes)
            if keep:
                items.append(cleaned)
        return True, items
    return True, value


def _refused(key: str, value: object, depth: int) -> str | None:
    """Why ``value`` (under ``key``) is dropped, or None if it is kept (its insides are judged
    one by one)."""
    kind = type(value)
    if value is None or kind is bool:
        return "a count that is a boolean" if kind is bool and key.endswith("tokens") else None
    if kind is int or kind is float:
        if kind is float and not math.isfinite(value):  # type: ignore[arg-type]
            return f"{value!r} is not a count"
        if not 0 <= value <= MAX_COUNT:  # type: ignore[operator]
            return f"{_shown(value)} is not a count from 0 to 2**53-1"
        return None
    if kind is str:
        return f"{_shown(value)} is not a count" if key.endswith("tokens") else None
    if isinstance(value, Mapping) or kind is list:
        return f"nesting deeper than {MAX_USAGE_DEPTH} levels" if depth > MAX_USAGE_DEPTH else None
    return f"a {kind.__name__} is not JSON"


def _shown(value: object) -> str:
    if isinstance(value, int) and not -(2**64) < value < 2**64:
        return f"an integer of {value.bit_length()} bits"
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def add_usage(total: dict[str, Any], usage: object) -> dict[str, Any]:
    """Sum two usage objects key by key (nested objects too), keeping every key. ``usage`` is
    normalised first (``clean_usage``); a sum past 2**53-1 stays there. A new dict."""
    cleaned, notes = clean_usage(usage)
    if notes:
        log.warning("model usage: dropped %d value(s) no count can be: %s", len(notes), "; ".join(notes[:10]))
        cleaned[DROPPED] = len(notes)
    return _sum(total, cleaned)


def _sum(total: dict[str, Any], usage: dict[str, Any]) -> dict[str, Any]:
    merged = dict(total)
    for key, value in usage.items():
        previous = merged.get(key)
        if isinstance(value, bool) or value is None:
            merged.setdefault(key, value)
        elif isinstance(value, (int, float)):
            base = previous if isinstance(previous, (int, float)) and not isinstance(previous, bool) else 0
            merged[key] = min(base + value, MAX_COUNT)
        elif isinstance(value, dict):
            merged[key] = _sum(previous if isinstance(previous, dict) else {}, value)
        else:
            merged[key] = value
    return merged


def account_turn(
    tokens_used: int, usage: dict[str, Any], tokens: object, turn_usage: object
) -> tuple[int, dict[str, Any]]:
    """The run's token count and usage after a turn that reported ``tokens`` and ``turn_usage``:
    a token count that is not one (``token_count``) adds nothing, with a warning and a note in
    the usage; the total stays at most 2**53-1."""
    counted = token_count(tokens)
    total = add_usage(usage, turn_usage)
    if counted is None:
        log.warning("model turn: its token count %s is not a count from 0 to 2**53-1; not counted", _shown(tokens))
        total[DROPPED] = total.get(DROPPED, 0) + 1
        counted = 0
    return min(tokens_used + counted, MAX_COUNT), total


__all__ = ["DROPPED", "account_turn", "add_usage", "clean_usage", "token_count"]
