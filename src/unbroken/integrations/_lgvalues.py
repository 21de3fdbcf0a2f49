"""LangGraph values as plain JSON, with nothing that runs code on load.

Plain JSON values (str, int, finite float, bool, None, lists, dicts with str keys) are stored
as themselves, so a checkpoint can be read by eye. A few Python types get a tagged object
(``{"__ub__": "bytes", ...}``: bytes, tuple, set, non-str-keyed dicts, non-finite floats).
Anything else (LangChain messages, LangGraph ``Send``/``Interrupt``/``Command``, datetimes,
...) goes through LangGraph's ``JsonPlusSerializer`` in its strict msgpack mode, base64 in a
tag: on load it rebuilds only the types on LangGraph's safe allowlist (plus any the user
names in ``allowed_types``), never imports or calls anything else, and never unpickles.
"""

from __future__ import annotations

import base64
import json
import math
from collections.abc import Iterable
from typing import Any

import orjson
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from ..state import JSONValue

TAG = "__ub__"
_TAG_BYTES = b'"__ub__"'


class ValueCodec:
    """Encode and decode channel values, writes, checkpoints and metadata as JSON."""

    def __init__(self, allowed_types: Iterable[tuple[str, ...] | type] = ()) -> None:
        serde = JsonPlusSerializer(allowed_msgpack_modules=None, pickle_fallback=False)
        extra = tuple(allowed_types)
        self._serde = serde.with_msgpack_allowlist(extra) if extra else serde

    def encode(self, value: Any) -> JSONValue:
        kind = type(value)
        if value is None or kind is str or kind is bool or kind is int:
            return value
        if kind is float:
            return value if math.isfinite(value) else {TAG: "float", "v": repr(value)}
        if kind is list:
            return [self.encode(item) for item in value]
        if kind is dict:
            if TAG not in value and all(type(key) is str for key in value):
                return {key: self.encode(item) for key, item in value.items()}
            return {TAG: "dict", "items": [[self.encode(k), self.encode(v)] for k, v in value.items()]}
        if kind is tuple:
            return {TAG: "tuple", "items": [self.encode(item) for item in value]}
        if kind is bytes or kind is bytearray:
            return {TAG: kind.__name__, "b64": base64.b64encode(value).decode()}
        if kind is set or kind is frozenset:
            return {TAG: kind.__name__, "items": [self.encode(item) for item in value]}
        type_name, data = self._serde.dumps_typed(value)
        return {TAG: "serde", "type": type_name, "b64": base64.b64encode(data).decode()}

    def decode(self, data: JSONValue) -> Any:
        """A fresh value from its encoding (the caller may modify it freely)."""
        if data is None or type(data) in (str, int, float, bool):
            return data
        try:
            text = orjson.dumps(data)
        except TypeError:  # an int beyond 64 bits: the standard library's slower path
            return json.loads(json.dumps(data), object_hook=self._revive)
        if _TAG_BYTES not in text:
            return orjson.loads(text)  # a deep copy made in C: nothing to revive
        # The hook sees every object, innermost first, and revives the tagged ones.
        return json.loads(text, object_hook=self._revive)

    def _revive(self, data: dict[str, Any]) -> Any:
        tag = data.get(TAG)
        if tag is None:
            return data
        if tag == "float":
            return float(data["v"])
        if tag == "dict":
            return {key: value for key, value in data["items"]}
        if tag == "tuple":
            return tuple(data["items"])
        if tag in ("bytes", "bytearray"):
            raw = base64.b64decode(data["b64"])
            return raw if tag == "bytes" else bytearray(raw)
        if tag in ("set", "frozenset"):
            return set(data["items"]) if tag == "set" else frozenset(data["items"])
        if tag == "serde":
            if data["type"] not in ("msgpack", "null", "bytes", "bytearray"):
                raise ValueError(f"refusing to load a value serialized as {data['type']!r}")
            return self._serde.loads_typed((data["type"], base64.b64decode(data["b64"])))
        raise ValueError(f"unknown value tag {tag!r}")
