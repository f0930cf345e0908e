"""Boundary decoding edge cases found by fuzzing: each is a typed bad_request, never an exception."""

from __future__ import annotations

import pytest

from conductor.wire import WireError, decode
from schemas.errors import ErrorCode
from schemas.solve import SolveRequest


@pytest.mark.parametrize(
    "payload",
    [
        b'{"question": "caf\xff"}',  # invalid UTF-8 inside a string: msgspec raises UnicodeDecodeError
        b'{"quest\xc3\x28ion": "q"}',
        b'{"question": "", "x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",  # RecursionError
        b"",
    ],
)
def test_malformed_payloads_are_typed_bad_requests(payload):
    with pytest.raises(WireError) as caught:
        decode(payload, SolveRequest)
    assert caught.value.info.code == ErrorCode.BAD_REQUEST
