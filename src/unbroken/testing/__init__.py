"""Testing aids shipped with unbroken: the store contract suite (needs pytest).

``from unbroken.testing import StoreContract`` imports pytest; nothing in ``unbroken`` itself
imports this package, so pytest stays a test-time dependency."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .contract import StoreContract


def __getattr__(name: str) -> Any:
    # Lazy, so other testing aids (fakes, scripted models) can be imported without pytest.
    if name == "StoreContract":
        from .contract import StoreContract

        return StoreContract
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["StoreContract"]
