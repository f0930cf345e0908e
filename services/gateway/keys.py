"""API keys for the gateway: who may call, and each key's limits. Keys are stored hashed (SHA-256), never in clear.

The keys file (TOML, mounted from a Secret in a cluster) lists one table per key::

    [[keys]]
    name = "team-a"                       # the label in metrics and logs; never the key itself
    sha256 = "9f86d0..."                  # hex SHA-256 of the key, from `conductor gateway-key --name team-a`
    rpm = 60                              # requests per minute, deployment-wide (optional)
    spend_usd_per_day = 5.0               # worker + planner dollars per UTC day, deployment-wide (optional)
    max_in_flight = 8                     # requests running at once, deployment-wide (optional)
    reserve_usd = 0.05                    # held per request while it runs, and its budget (optional; default:
                                          # CONDUCTOR_GATEWAY_RESERVE_USD)

Keys are long random tokens, so a plain SHA-256 is the right hash (a slow password hash defends low-entropy
secrets and would add milliseconds to every request). A presented key is hashed and looked up; the lookup is by
digest, so timing reveals nothing about stored keys.

``authenticate`` reads a request's ``Authorization`` header; without a keys file (anonymous access, local
development only) every request is ``ANONYMOUS``, with no limits.
"""

from __future__ import annotations

import hashlib
import re
import secrets
import tomllib
from pathlib import Path
from typing import Annotated

import msgspec

from services.gateway.errors import GatewayError

KEY_PREFIX = "cnd-"
_HEX = re.compile(r"^[0-9a-f]{64}$")
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


class KeysFileError(ValueError):
    """The keys file is missing or malformed: the gateway refuses to start rather than let anyone in."""


class ApiKey(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    name: str
    sha256: str
    rpm: int | None = None
    spend_usd_per_day: float | None = None
    max_in_flight: Annotated[int, msgspec.Meta(ge=1)] | None = (
        None  # requests running at once, deployment-wide
    )
    reserve_usd: Annotated[float, msgspec.Meta(gt=0)] | None = (
        None  # held per request while it runs (its budget)
    )


ANONYMOUS = ApiKey(name="anonymous", sha256="0" * 64)


class _KeysFile(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    keys: list[ApiKey]


def digest(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def new_key(name: str) -> tuple[str, ApiKey]:
    """A fresh key and its stored entry: the key is shown once, only the digest is kept."""
    key = KEY_PREFIX + secrets.token_urlsafe(32)
    return key, ApiKey(name=name, sha256=digest(key))


def entry_toml(entry: ApiKey) -> str:
    lines = ["[[keys]]", f'name = "{entry.name}"', f'sha256 = "{entry.sha256}"']
    if entry.rpm is not None:
        lines.append(f"rpm = {entry.rpm}")
    if entry.spend_usd_per_day is not None:
        lines.append(f"spend_usd_per_day = {entry.spend_usd_per_day}")
    if entry.max_in_flight is not None:
        lines.append(f"max_in_flight = {entry.max_in_flight}")
    if entry.reserve_usd is not None:
        lines.append(f"reserve_usd = {entry.reserve_usd}")
    return "\n".join(lines) + "\n"


class KeyRing:
    """The loaded keys, by digest."""

    def __init__(self, keys: list[ApiKey]) -> None:
        self._by_digest = {k.sha256: k for k in keys}

    def __len__(self) -> int:
        return len(self._by_digest)

    def lookup(self, presented: str) -> ApiKey | None:
        return self._by_digest.get(digest(presented))

    def authenticate(self, authorization: str) -> ApiKey:
        """The key an ``Authorization: Bearer <key>`` header presents, or the 401."""
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise GatewayError(
                401,
                "missing API key: send 'Authorization: Bearer <key>'",
                kind="invalid_request_error",
                code="missing_api_key",
            )
        token = token.strip()
        key = (
            self.lookup(token) if token.isascii() and token.isprintable() else None
        )  # a key is printable ASCII
        if key is None:
            raise GatewayError(401, "invalid API key", kind="invalid_request_error", code="invalid_api_key")
        return key

    @classmethod
    def load(cls, path: Path, *, reserve_usd: float | None = None) -> KeyRing:
        """The keys of ``path``; ``reserve_usd`` is the gateway's default hold per request (``CONDUCTOR_GATEWAY_
        RESERVE_USD``), which a key's spend limit must cover."""
        try:
            raw = tomllib.loads(path.read_text(encoding="utf-8"))
        except OSError as exc:
            raise KeysFileError(f"cannot read the gateway keys file {path}: {exc}") from exc
        except tomllib.TOMLDecodeError as exc:
            raise KeysFileError(f"gateway keys file {path} is not valid TOML: {exc}") from exc
        try:
            parsed = msgspec.convert(raw, _KeysFile)
        except msgspec.ValidationError as exc:
            raise KeysFileError(f"gateway keys file {path}: {exc}") from exc
        return cls(_checked(parsed.keys, path, reserve_usd))


def _checked(keys: list[ApiKey], path: Path, reserve_usd: float | None = None) -> list[ApiKey]:
    names: set[str] = set()
    digests: set[str] = set()
    for i, key in enumerate(keys):
        where = f"gateway keys file {path}, keys[{i}]"
        if not NAME.match(key.name):
            raise KeysFileError(f"{where}: name {key.name!r} must be 1-64 letters, digits, '.', '_' or '-'")
        if not _HEX.match(key.sha256):
            raise KeysFileError(f"{where}: sha256 must be 64 lowercase hex digits (the key's SHA-256)")
        if key.rpm is not None and key.rpm < 1:
            raise KeysFileError(f"{where}: rpm must be >= 1")
        if key.spend_usd_per_day is not None and not key.spend_usd_per_day > 0:
            raise KeysFileError(f"{where}: spend_usd_per_day must be > 0")
        held = key.reserve_usd or reserve_usd
        if key.spend_usd_per_day is not None and held is not None and held > key.spend_usd_per_day:
            whose = "its reserve_usd" if key.reserve_usd else "CONDUCTOR_GATEWAY_RESERVE_USD"
            raise KeysFileError(
                f"{where}: spend_usd_per_day ${key.spend_usd_per_day:g} is below the ${held:g} held per request "
                f"({whose}): every request would be refused; raise the limit or lower the reserve"
            )
        if key.name in names or key.sha256 in digests:
            raise KeysFileError(f"{where}: duplicate name or key")
        names.add(key.name)
        digests.add(key.sha256)
    if not keys:
        raise KeysFileError(f"gateway keys file {path} lists no keys")
    return keys
