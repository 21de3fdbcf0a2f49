"""What ``--agent`` names, the same in every command (``resume``, ``chaos``, ``worker``, ``submit``).

A reference is ``module:attr`` (``attr`` may be dotted; modules in the working directory
resolve, as with ``python -m``) or ``path/to/file.py:attr``. ``attr`` is one of:

* an ``Agent``;
* a function taking no arguments that returns an ``Agent``;
* a function taking the store (one positional argument) that returns an ``Agent`` on it.

``load_agent(ref)`` imports it once and checks its shape; ``AgentRef.build(store)`` then gives
an ``Agent`` on that store, however it was named: a store-taking function is called with it, and
an agent built on another store is copied onto it (the original is left as it was).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from .errors import ConfigError
from .runner import Agent
from .stores.base import Store

EXAMPLE = "myapp.agents:build_agent or path/to/agents.py:build_agent"
Shape = Literal["agent", "no_arguments", "takes_store"]


@dataclass(frozen=True)
class AgentRef:
    """A loaded ``--agent`` reference. ``shape`` says which of the three forms it is."""

    spec: str
    target: Any
    shape: Shape

    @property
    def needs_store(self) -> bool:
        """True when only a given store can build the agent (a function taking the store)."""
        return self.shape == "takes_store"

    def build(self, store: Store | None = None) -> Agent:
        """An ``Agent`` on ``store``; with ``store=None``, on the store the agent was built with
        (a function taking the store then raises ``ConfigError``: pass one)."""
        if self.shape == "agent":
            agent: object = self.target
        elif self.shape == "no_arguments":
            agent = self.target()
        elif store is None:
            raise ConfigError(f"--agent {self.spec!r} takes the store; give one with --store URL")
        else:
            agent = self.target(store)
        if not isinstance(agent, Agent):
            raise ConfigError(f"--agent {self.spec!r} returned a {type(agent).__name__}, not an unbroken Agent")
        return agent if store is None else on_store(agent, store)

    def factory(self) -> Callable[[Store], Agent]:
        """``build`` as a function of the store, as ``Worker`` and ``unbroken chaos`` take it."""
        return self.build


def on_store(agent: Agent, store: Store) -> Agent:
    """``agent`` itself when it is on ``store``, else a copy of it on ``store`` (``Agent.replace``)."""
    if agent.store is store:
        return agent
    return agent.replace(store=store)


def parse_agent_ref(spec: str) -> tuple[str, str]:
    """Split ``module:attr`` or ``path/to/file.py:attr`` into its two parts, or raise ``ConfigError``."""
    target, _, attr = spec.rpartition(":")
    if not target or not attr or not all(part.isidentifier() for part in attr.split(".")):
        raise ConfigError(f"--agent {spec!r} must look like module:attr or path/to/file.py:attr, e.g. {EXAMPLE}")
    if not target.endswith(".py") and not all(part.isidentifier() for part in target.split(".")):
        raise ConfigError(f"--agent {spec!r}: {target!r} is neither a module name nor a path to a .py file")
    return target, attr


def load_agent(spec: str) -> AgentRef:
    """Import what ``spec`` names and check that it is an ``Agent`` or a function returning one.
    Nothing is built yet (a function is not called): see ``AgentRef.build``."""
    target, attr = parse_agent_ref(spec)
    module = _import_file(spec, Path(target)) if target.endswith(".py") else _import_module(spec, target)
    found: Any = module
    for part in attr.split("."):
        if not hasattr(found, part):
            raise ConfigError(f"--agent {spec!r}: {target} has no attribute {attr!r}")
        found = getattr(found, part)
    return AgentRef(spec, found, _shape_of(spec, found))


def _shape_of(spec: str, found: Any) -> Shape:
    if isinstance(found, Agent):
        return "agent"
    if not callable(found) or isinstance(found, type):
        raise ConfigError(f"--agent {spec!r} is a {type(found).__name__}, not an Agent or a function returning one")
    try:
        signature = inspect.signature(found)
    except (TypeError, ValueError):
        return "no_arguments"  # no signature to read (a builtin): call it as documented
    for arguments in ((), (None,)):
        try:
            signature.bind(*arguments)
        except TypeError:
            continue
        return "no_arguments" if not arguments else "takes_store"
    raise ConfigError(
        f"--agent {spec!r} must be an Agent, or a function taking no arguments or taking the store "
        f"(it takes {signature})"
    )


def _import_module(spec: str, name: str) -> Any:
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # like `python -m`: modules in the working directory resolve
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and name.startswith(exc.name):
            raise ConfigError(f"--agent {spec!r}: no module named {exc.name!r} (from {os.getcwd()})") from exc
        raise _import_failed(spec, f"python -c 'import {name}'", exc) from exc
    except Exception as exc:
        raise _import_failed(spec, f"python -c 'import {name}'", exc) from exc


def _import_file(spec: str, path: Path) -> Any:
    path = path.expanduser().resolve()
    if not path.is_file():
        raise ConfigError(f"--agent {spec!r}: no file {path}")
    name = path.stem
    loaded = sys.modules.get(name)
    if loaded is not None and getattr(loaded, "__file__", None) == str(path):
        return loaded  # already imported from this very file
    if loaded is not None:  # another module has that name (json.py, agents.py twice): never replace it
        name = f"{path.stem}_{hashlib.sha256(str(path).encode()).hexdigest()[:12]}"
        if name in sys.modules:
            return sys.modules[name]
    module_spec = importlib.util.spec_from_file_location(name, path)
    if module_spec is None or module_spec.loader is None:
        raise ConfigError(f"--agent {spec!r}: {path} cannot be imported as a Python module")
    if str(path.parent) not in sys.path:
        sys.path.insert(0, str(path.parent))  # like `python file.py`: its neighbours import
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[name] = module
    try:
        module_spec.loader.exec_module(module)
    except Exception as exc:
        del sys.modules[name]
        raise _import_failed(spec, f"python {path}", exc) from exc
    return module


def _import_failed(spec: str, command: str, exc: BaseException) -> ConfigError:
    return ConfigError(
        f"--agent {spec!r}: importing it raised {type(exc).__name__}: {exc} (run `{command}` to see where)"
    )


__all__ = ["AgentRef", "load_agent", "on_store", "parse_agent_ref"]
