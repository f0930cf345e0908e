"""Decoding at the service boundary: bytes in, a typed payload or a typed ``ErrorInfo`` naming the field.

Every handler decodes through here so bad input is classified once: malformed JSON, wrong types, missing fields
and oversize payloads become ``bad_request``/``payload_too_large`` replies, never exceptions that kill a handler.
"""

from __future__ import annotations

import re
from typing import TypeVar

import msgspec

from schemas.errors import ErrorCode, ErrorInfo

T = TypeVar("T")

_PATH = re.compile(r" - at `\$\.?(?P<path>[^`]*)`$")
_MISSING = re.compile(r"Object missing required field `(?P<field>[^`]+)`")

_encoder = msgspec.json.Encoder()
_decoders: dict[type, msgspec.json.Decoder] = {}


class WireError(Exception):
    """Raised by ``decode`` with the typed error to send back."""

    def __init__(self, info: ErrorInfo) -> None:
        super().__init__(info.message)
        self.info = info


def encode(obj: object) -> bytes:
    return _encoder.encode(obj)


def _decoder(kind: type[T]) -> msgspec.json.Decoder:
    dec = _decoders.get(kind)
    if dec is None:
        dec = _decoders[kind] = msgspec.json.Decoder(kind)
    return dec


def field_of(err: msgspec.ValidationError) -> str | None:
    """The dotted path msgspec reports for a validation error (``$.pool[2]`` -> ``pool[2]``)."""
    text = str(err)
    m = _PATH.search(text)
    path = m.group("path") if m else ""
    missing = _MISSING.search(text)
    if missing:
        path = f"{path}.{missing.group('field')}" if path else missing.group("field")
    return path or None


def decode(data: bytes, kind: type[T], *, max_bytes: int | None = None) -> T:
    """Decode JSON ``data`` as ``kind`` or raise ``WireError`` carrying a typed, field-naming error."""
    if max_bytes is not None and len(data) > max_bytes:
        raise WireError(
            ErrorInfo(
                code=ErrorCode.PAYLOAD_TOO_LARGE,
                message=f"payload is {len(data)} bytes; the limit is {max_bytes}",
            )
        )
    try:
        return _decoder(kind).decode(data)
    except msgspec.ValidationError as exc:
        raise WireError(ErrorInfo(code=ErrorCode.BAD_REQUEST, message=str(exc), field=field_of(exc))) from exc
    except msgspec.DecodeError as exc:
        raise WireError(ErrorInfo(code=ErrorCode.BAD_REQUEST, message=f"malformed JSON: {exc}")) from exc
    except (
        UnicodeDecodeError
    ) as exc:  # msgspec raises this (not DecodeError) for invalid UTF-8 inside a string
        raise WireError(
            ErrorInfo(code=ErrorCode.BAD_REQUEST, message=f"invalid UTF-8: {exc.reason}")
        ) from exc
    except RecursionError as exc:  # pathological nesting depth
        raise WireError(ErrorInfo(code=ErrorCode.BAD_REQUEST, message="payload nested too deeply")) from exc
