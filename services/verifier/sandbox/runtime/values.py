"""A strict, tagged JSON encoding of plain Python values that crosses the sandbox boundary in both directions.

Why not pickle: decoding must never run code. Why not plain JSON: it would erase the difference between a tuple and
a list, an int and a bool, a set and a list, and the verifier compares with strict types. Only exact builtin types
are encoded (a subclass of ``int`` with a rigged ``__eq__`` is refused, not silently converted), so a value decoded
on the trusted side is always a plain builtin whose comparisons the candidate does not control.
"""

from __future__ import annotations

import base64
import json

MAX_DEPTH = 64
MAX_ITEMS = 2_000_000


class UnencodableValue(TypeError):
    """The candidate returned something that is not a plain builtin value (or is too deep/large)."""


class MalformedValue(ValueError):
    """A frame did not hold a well-formed encoded value."""


def _numpy_scalar(value: object) -> object | None:
    """numpy scalars are common in legitimate answers; turn them into the builtin they stand for."""
    kind = type(value)
    if kind.__module__ != "numpy" or not hasattr(value, "item"):
        return None
    name = kind.__name__
    if name.startswith(("int", "uint", "float", "bool", "complex", "str")):
        plain = value.item()  # type: ignore[attr-defined]
        if type(plain) in (int, float, bool, complex, str):
            return plain
    return None


def to_tree(value: object, depth: int = 0, budget: list[int] | None = None) -> object:
    """Turn a value into a JSON-able tree with explicit tags for every non-JSON distinction."""
    budget = budget if budget is not None else [MAX_ITEMS]
    budget[0] -= 1
    if depth > MAX_DEPTH or budget[0] < 0:
        raise UnencodableValue("value too deep or too large")
    kind = type(value)
    if value is None or kind is bool or kind is int or kind is str:
        return value
    if kind is float:
        return {"f": repr(value)}  # repr round-trips exactly, including 'nan', 'inf', '-inf'
    if kind is list:
        return [to_tree(v, depth + 1, budget) for v in value]  # type: ignore[union-attr]
    if kind is tuple:
        return {"t": [to_tree(v, depth + 1, budget) for v in value]}  # type: ignore[union-attr]
    if kind is dict:
        return {
            "d": [[to_tree(k, depth + 1, budget), to_tree(v, depth + 1, budget)] for k, v in value.items()]
        }  # type: ignore[union-attr]
    if kind is set or kind is frozenset:
        tag = "s" if kind is set else "fs"
        return {tag: [to_tree(v, depth + 1, budget) for v in value]}  # type: ignore[union-attr]
    if kind is bytes:
        return {"b": base64.b64encode(value).decode()}  # type: ignore[arg-type]
    if kind is complex:
        return {"c": [repr(value.real), repr(value.imag)]}  # type: ignore[union-attr]
    plain = _numpy_scalar(value)
    if plain is not None:
        return to_tree(plain, depth, budget)
    raise UnencodableValue(f"unsupported type {kind.__module__}.{kind.__qualname__}")


def from_tree(tree: object, depth: int = 0) -> object:
    """Inverse of :func:`to_tree`; rejects anything it did not produce."""
    if depth > MAX_DEPTH + 1:
        raise MalformedValue("too deep")
    kind = type(tree)
    if tree is None or kind is bool or kind is int or kind is str:
        return tree
    if kind is list:
        return [from_tree(v, depth + 1) for v in tree]  # type: ignore[union-attr]
    if kind is not dict or len(tree) != 1:  # type: ignore[arg-type]
        raise MalformedValue(f"unexpected node {kind.__name__}")
    ((tag, body),) = tree.items()  # type: ignore[union-attr]
    try:
        return _decode_tagged(tag, body, depth)
    except (TypeError, ValueError, KeyError) as exc:
        raise MalformedValue(f"bad {tag!r} node: {exc}") from exc


def _decode_tagged(tag: str, body: object, depth: int) -> object:
    if tag == "f":
        if type(body) is not str:
            raise MalformedValue("float must be a repr string")
        return float(body)
    if tag == "c":
        re_, im = body  # type: ignore[misc]
        return complex(float(re_), float(im))
    if tag == "b":
        return base64.b64decode(body, validate=True)  # type: ignore[arg-type]
    if type(body) is not list:
        raise MalformedValue(f"{tag!r} needs a list body")
    if tag == "t":
        return tuple(from_tree(v, depth + 1) for v in body)
    if tag == "s":
        return {from_tree(v, depth + 1) for v in body}
    if tag == "fs":
        return frozenset(from_tree(v, depth + 1) for v in body)
    if tag == "d":
        out = {}
        for pair in body:
            if type(pair) is not list or len(pair) != 2:
                raise MalformedValue("dict entries are [key, value] pairs")
            out[from_tree(pair[0], depth + 1)] = from_tree(pair[1], depth + 1)
        return out
    raise MalformedValue(f"unknown tag {tag!r}")


def dumps(value: object) -> str:
    return json.dumps(to_tree(value), separators=(",", ":"))


def loads(text: str | bytes) -> object:
    try:
        tree = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise MalformedValue(str(exc)) from exc
    return from_tree(tree)
