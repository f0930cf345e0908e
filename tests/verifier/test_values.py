"""The boundary encoding: round-trips plain values exactly, keeps type distinctions, refuses everything else."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.verifier.sandbox.runtime import values

scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text() | st.binary()
hashable = st.recursive(
    scalars, lambda inner: st.tuples(inner, inner) | st.frozensets(inner, max_size=3), max_leaves=8
)
plain = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.tuples(inner, inner)
        | st.dictionaries(hashable, inner, max_size=3)
        | st.sets(hashable, max_size=3)
    ),
    max_leaves=20,
)


@given(plain)
def test_round_trip_is_exact_in_value_and_type(value: object) -> None:
    back = values.loads(values.dumps(value))
    assert back == value
    assert shape(back) == shape(value)


def shape(value: object) -> object:
    """Types all the way down (order-free for sets), since ``==`` alone would let ``True`` pass for ``1``."""
    if isinstance(value, list | tuple):
        return (type(value), [shape(v) for v in value])
    if isinstance(value, set | frozenset):
        return (type(value), sorted(repr(shape(v)) for v in value))
    if isinstance(value, dict):
        return (dict, sorted((repr(shape(k)), repr(shape(v))) for k, v in value.items()))
    return type(value)


def test_type_distinctions_survive() -> None:
    assert values.loads(values.dumps([True, 1, 1.0, (1,), {1}])) == [True, 1, 1.0, (1,), {1}]
    decoded = values.loads(values.dumps([True, 1, 1.0, (1,)]))
    assert [type(v) for v in decoded] == [bool, int, float, tuple]
    assert math.isnan(values.loads(values.dumps(float("nan"))))  # type: ignore[arg-type]
    assert values.loads(values.dumps(float("-inf"))) == float("-inf")


class RiggedInt(int):
    def __eq__(self, other: object) -> bool:
        return True

    __hash__ = int.__hash__


class Anything:
    def __eq__(self, other: object) -> bool:
        return True


@pytest.mark.parametrize(
    "value", [RiggedInt(3), Anything(), [1, Anything()], {"k": RiggedInt(1)}, iter([1]), print]
)
def test_refuses_anything_but_exact_builtins(value: object) -> None:
    with pytest.raises(values.UnencodableValue):
        values.dumps(value)


def test_refuses_too_deep() -> None:
    deep: list = []
    for _ in range(values.MAX_DEPTH + 5):
        deep = [deep]
    with pytest.raises(values.UnencodableValue):
        values.dumps(deep)


@pytest.mark.parametrize(
    "text", ['{"x": 1}', '{"f": 1.5}', '{"t": 3}', '{"a": 1, "b": 2}', "[1,", '{"d": [[1]]}']
)
def test_refuses_malformed_trees(text: str) -> None:
    with pytest.raises(values.MalformedValue):
        values.loads(text)
