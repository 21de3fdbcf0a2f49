"""Plain data classes: what ``@dataclass`` gives the classes of ``state.py``, without its cost.

``@dataclass`` writes each class's ``__init__``, ``__repr__``, ``__eq__`` (and a frozen class's
``__setattr__``) as source text and compiles it with ``exec`` every time the module is imported:
~0.5 ms a class, no bytecode cache, and ``dataclasses`` itself imports ``inspect``. A resume
imports ~50 such classes before it can ask its model (issue 24). A class here is written out
instead: its fields are annotated in the class body, in order (as a dataclass's), ``__slots__``
names the same fields, and its own ``__init__`` sets them (compiled once, into the package's
bytecode, like any function). This base gives the rest, in one place:

* equality: same class and equal fields (``dataclass``'s rule); ``Frozen`` ones also hash;
* ``repr``: ``Name(field=value, ...)``, as a dataclass's;
* ``replace(**changes)``: a copy with some fields changed (``dataclasses.replace``'s rule);
* ``__match_args__``: the fields in order, so positional ``case`` patterns still match;
* ``dataclasses.fields``, ``dataclasses.replace``, ``dataclasses.asdict`` and ``is_dataclass``
  keep working on these classes: the first of them to ask builds the ``Field`` objects (importing
  ``dataclasses`` then), so code written against the old dataclasses runs unchanged.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from dataclasses import Field
    from typing import Self


class _DataclassFields:
    """``__dataclass_fields__`` of a plain class, built on first access from its fields."""

    def __get__(self, instance: object, owner: type[Plain]) -> dict[str, Any]:
        import dataclasses

        annotations: dict[str, Any] = {}
        for cls in reversed(owner.__mro__):
            annotations.update(vars(cls).get("__annotations__", {}))
        made = dataclasses.make_dataclass(owner.__name__, [(name, annotations[name]) for name in owner._fields])
        fields = {field.name: field for field in dataclasses.fields(made)}
        type.__setattr__(owner, "__dataclass_fields__", fields)  # cached on the class from now on
        return fields


class Plain:
    """Base of a hand-written data class (see the module docstring). A subclass annotates its
    fields in ``__init__``'s order, names them in ``__slots__`` and sets each in ``__init__``."""

    __slots__ = ()
    _fields: ClassVar[tuple[str, ...]] = ()
    _not_shown: ClassVar[frozenset[str]] = frozenset()
    """Fields left out of ``repr`` (what ``field(repr=False)`` said of a dataclass's)."""
    _not_compared: ClassVar[frozenset[str]] = frozenset()
    """Fields left out of equality and hashing (``field(compare=False)``)."""
    _shown: ClassVar[tuple[str, ...]] = ()
    _compared: ClassVar[tuple[str, ...]] = ()
    if TYPE_CHECKING:  # what dataclasses.fields/replace/asdict are typed to take
        __dataclass_fields__: ClassVar[dict[str, Field[Any]]]
    else:
        __dataclass_fields__ = _DataclassFields()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "__slots__" not in vars(cls):
            # A subclass that declares no fields keeps its base's (as a subclass of a dataclass
            # that is not itself decorated): its annotations, if any, are not fields.
            return
        own = tuple(vars(cls).get("__annotations__", {}))  # this class's own, in order (not inherited)
        if set(own) != set(vars(cls)["__slots__"]):
            raise TypeError(f"{cls.__qualname__}: __slots__ must name exactly the annotated fields {own}")
        cls._fields = cls._fields + own
        cls._shown = tuple(name for name in cls._fields if name not in cls._not_shown)
        cls._compared = tuple(name for name in cls._fields if name not in cls._not_compared)
        type.__setattr__(cls, "__match_args__", cls._fields)

    def __repr__(self) -> str:
        shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in self._shown)
        return f"{type(self).__qualname__}({shown})"

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._compared_values() == other._compared_values()

    # (no __hash__: defining __eq__ makes the class unhashable, as a dataclass that is not frozen)

    def _compared_values(self) -> tuple[Any, ...]:
        return tuple(getattr(self, name) for name in self._compared)

    def replace(self, **changes: Any) -> Self:
        """A copy with ``changes`` applied (an unknown name raises ``TypeError``)."""
        values = {name: getattr(self, name) for name in self._fields}
        values.update(changes)
        return type(self)(**values)


class Frozen(Plain):
    """A ``Plain`` class whose fields cannot be assigned after ``__init__`` (which sets them
    with ``object.__setattr__``); hashable, as a frozen dataclass."""

    __slots__ = ()

    def __setattr__(self, name: str, value: Any) -> None:
        from dataclasses import FrozenInstanceError  # (the error a frozen dataclass raises)

        raise FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        from dataclasses import FrozenInstanceError

        raise FrozenInstanceError(f"cannot delete field {name!r}")

    def __hash__(self) -> int:
        return hash(self._compared_values())

    def __getstate__(self) -> tuple[Any, ...]:  # copy and pickle: set back without __setattr__
        return tuple(getattr(self, name) for name in self._fields)

    def __setstate__(self, state: tuple[Any, ...]) -> None:
        for name, value in zip(self._fields, state, strict=True):
            object.__setattr__(self, name, value)
