"""What a sweep runs: the user's agent, loaded from a spec, and the kind of store each run gets."""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..errors import ConfigError
from ..runner import Agent
from ..stores.base import Store

AgentFactory = Callable[[Store], Agent]


@dataclass(frozen=True)
class StoreKind:
    """How to give a run its own store. ``in_world``: the store lives inside the run's directory
    (so the world can be copied to test recovery on the copy)."""

    name: str
    url: Callable[[Path], str]
    in_world: bool = True


STORE_KINDS: dict[str, StoreKind] = {
    "sqlite": StoreKind("sqlite", lambda world: f"sqlite:///{world / 'store.db'}"),
    "file": StoreKind("file", lambda world: f"file://{world / 'store'}"),
}
"""Stores the sweep knows. A server store is one more line: ``StoreKind("postgres", lambda
world: URL, in_world=False)`` (each run gets its own run id, so they can share a database)."""


def load_factory(spec: str) -> AgentFactory:
    """``module:attr`` or ``path/to/file.py:attr``; ``attr`` is an ``Agent`` (its store is
    replaced) or a callable taking the store and returning an ``Agent``."""
    target, _, attr = spec.rpartition(":")
    if not target or not attr:
        raise ConfigError(f"--agent {spec!r} must look like module:attr or path/to/file.py:attr")
    try:
        if target.endswith(".py"):
            path = Path(target).resolve()
            module_spec = importlib.util.spec_from_file_location(path.stem, path)
            if module_spec is None or module_spec.loader is None:
                raise ImportError(f"cannot load {path}")
            sys.path.insert(0, str(path.parent))
            module = importlib.util.module_from_spec(module_spec)
            sys.modules[path.stem] = module
            module_spec.loader.exec_module(module)
        else:
            if os.getcwd() not in sys.path:
                sys.path.insert(0, os.getcwd())
            module = importlib.import_module(target)
        found = getattr(module, attr)
    except (ImportError, AttributeError, OSError) as exc:
        raise ConfigError(f"cannot load agent {spec!r}: {exc}") from exc
    if isinstance(found, Agent):
        template = found

        def from_template(store: Store) -> Agent:
            template.store = store
            return template

        return from_template
    if not callable(found):
        raise ConfigError(f"{spec!r} is neither an Agent nor a function returning one")

    def from_factory(store: Store) -> Agent:
        agent = found(store)
        if not isinstance(agent, Agent):
            raise ConfigError(f"{spec!r} returned {type(agent).__name__}, not an unbroken Agent")
        return agent

    return from_factory
