"""What a sweep runs: the user's agent and check, loaded from a spec, and the kind of store each
run gets. Built on the public API only: stores are opened by URL and cleaned up with
``list_runs``/``delete_run``."""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...agent_ref import load_agent
from ...errors import ConfigError
from ...runner import Agent
from ...stores import open_store
from ...stores.base import Store
from ._journal import CHAOS_DIR

AgentFactory = Callable[[Store], Agent]
Check = Callable[[Path], Sequence[str] | None]
"""A user check: given a finished run's directory, the problems found there (none: [] or None)."""


@dataclass(frozen=True)
class StoreKind:
    """How to give a run its own store.

    ``in_world``: the store lives in the run's directory, so copying the directory (plus
    ``copy_store`` when it does not) copies the store, and recovering twice can be checked on
    the copy. A store outside the directory (a server) is shared by the runs of a sweep, each
    under its own run id, and its runs are deleted at the end."""

    name: str
    url: Callable[[Path], str]
    in_world: bool = True
    copy_store: Callable[[Path, Path], None] | None = None
    """Copy the store of the world at the first path into the (new) world at the second."""
    drop_store: Callable[[Path], None] | None = None
    """Delete the store of one world, for stores that do not live in its directory."""
    drop_all: Callable[[Path], None] | None = None
    """Delete the stores of every world under a working directory (after a sweep, even a failed one)."""


STORE_KINDS: dict[str, StoreKind] = {
    "sqlite": StoreKind("sqlite", lambda world: f"sqlite:///{world / CHAOS_DIR / 'store.db'}"),
    "file": StoreKind("file", lambda world: f"file://{world / CHAOS_DIR / 'store'}"),
}
"""Stores each run gets in its own directory (``.chaos/`` inside it). For a server store, see
``server_kind``."""


def sweep_token(workdir: Path) -> str:
    """A short name for one working directory: run ids of different sweeps never collide."""
    return hashlib.sha256(str(workdir.resolve()).encode()).hexdigest()[:8]


def server_kind(name: str, url: str) -> StoreKind:
    """A store on a server (``postgresql://...?schema=...``): every run of a sweep shares it,
    each under its own run id (``chaos-<sweep>-<run>``); the sweep deletes its runs at the end.
    Recovering twice is not checked (it needs a copy of the store)."""

    def drop_all(workdir: Path) -> None:
        prefix = f"chaos-{sweep_token(workdir)}-"
        with open_store(url) as store:
            for summary in store.list_runs():
                if summary.run_id.startswith(prefix):
                    store.delete_run(summary.run_id)

    return StoreKind(name, lambda world: url, in_world=False, drop_all=drop_all)


def resolve_kind(store_kind: str | StoreKind) -> StoreKind:
    if isinstance(store_kind, StoreKind):
        return store_kind
    try:
        return STORE_KINDS[store_kind]
    except KeyError:
        raise ConfigError(
            f"store kind {store_kind!r} is not one of {', '.join(STORE_KINDS)}; for a server store pass "
            "server_kind(name, url)"
        ) from None


def drop_stores(store_kind: str | StoreKind, workdir: Path) -> None:
    """Delete what a sweep in ``workdir`` left in a server store (nothing to do for the others)."""
    kind = resolve_kind(store_kind)
    if kind.drop_all is not None:
        kind.drop_all(workdir)


def load_attr(spec: str, option: str) -> Any:
    """The object ``spec`` names: ``module:attr`` or ``path/to/file.py:attr``."""
    target, _, attr = spec.rpartition(":")
    if not target or not attr:
        raise ConfigError(f"{option} {spec!r} must look like module:attr or path/to/file.py:attr")
    try:
        if target.endswith(".py"):
            path = Path(target).resolve()
            module_spec = importlib.util.spec_from_file_location(path.stem, path)
            if module_spec is None or module_spec.loader is None:
                raise ImportError(f"cannot load {path}")
            if str(path.parent) not in sys.path:
                sys.path.insert(0, str(path.parent))
            module = importlib.util.module_from_spec(module_spec)
            sys.modules[path.stem] = module
            module_spec.loader.exec_module(module)
        else:
            if os.getcwd() not in sys.path:
                sys.path.insert(0, os.getcwd())
            module = importlib.import_module(target)
        return getattr(module, attr)
    except (ImportError, AttributeError, OSError) as exc:
        raise ConfigError(f"cannot load {option} {spec!r}: {exc}") from exc


def _takes_arguments(fn: Callable[..., Any]) -> bool:
    try:
        parameters = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return True
    required = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return any(p.default is inspect.Parameter.empty and p.kind in required for p in parameters)


def load_factory(spec: str) -> AgentFactory:
    """What ``--agent`` names (``module:attr`` or ``path/to/file.py:attr``: an ``Agent``, or a
    function taking the store or nothing), as a function of the store each run gets."""
    return load_agent(spec).factory()


def load_check(spec: str) -> Check:
    """``module:function`` or ``path/to/file.py:function``: called with a finished run's
    directory (also in ``$UNBROKEN_CHAOS_DIR`` while it runs), or with nothing if it takes no
    argument; it returns the problems it found, as strings."""
    found = load_attr(spec, "--check")
    if not callable(found):
        raise ConfigError(f"--check {spec!r} is not a function")
    if _takes_arguments(found):
        return found  # type: ignore[no-any-return]
    return lambda world: found()


def problems_of(check: Check, spec: str, world: Path, env_var: str) -> list[str]:
    """Run ``check`` on ``world`` and return its problems; a check that raises or returns
    something that is not a list of strings is itself a problem (it says so)."""
    before = os.environ.get(env_var)
    os.environ[env_var] = str(world)
    try:
        found = check(world)
    except Exception as exc:
        return [f"the check {spec} raised {type(exc).__name__}: {exc}"]
    finally:
        if before is None:
            os.environ.pop(env_var, None)
        else:
            os.environ[env_var] = before
    if found is None:
        return []
    if not isinstance(found, list | tuple):
        return [f"the check {spec} returned {type(found).__name__}; it must return a list of problems (strings)"]
    return [str(problem) for problem in found]
