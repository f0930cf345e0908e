"""Settings: one typed mechanism for every service, read once at start-up from the environment (never at import).

A setting is a field of a frozen msgspec Struct annotated with its environment variable::

    max_payload_bytes: Annotated[Count, MAX_PAYLOAD_BYTES] = 1_048_576

where ``MAX_PAYLOAD_BYTES = Env("CONDUCTOR_MAX_PAYLOAD_BYTES", "one line of documentation")``: the field's
default is the setting's default, its ``msgspec.Meta`` is its bound, the ``Env`` its one name and its
documentation. ``read(Settings, env)`` builds the Struct: every variable that is set is parsed by the field's type
(one number parser, one boolean spelling set, empty = unset), checked against its bound, and a malformed or
out-of-bounds value is a ``SettingsError`` naming the variable — at start-up, never on the first request.
Fields holding another settings Struct are read recursively; ``EnvFields`` reads a wire type (a ``Budget``) from
one variable per field. ``settings_table`` lists every declared setting for docs/settings.md.

A setting read by two services (``CONDUCTOR_MAX_STEPS_CAP``) is one ``Env`` object annotating a field in each.
"""

from __future__ import annotations

import math
import os
import types
import typing
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, TypeVar

import msgspec

S = TypeVar("S", bound=msgspec.Struct)

TRUE = frozenset({"1", "true", "yes", "on"})
FALSE = frozenset({"0", "false", "no", "off"})
"""The one boolean spelling set (case-insensitive)."""

Count = Annotated[int, msgspec.Meta(ge=1)]
NonNegative = Annotated[int, msgspec.Meta(ge=0)]
Seconds = Annotated[float, msgspec.Meta(ge=0)]
PositiveSeconds = Annotated[float, msgspec.Meta(gt=0)]
Port = Annotated[int, msgspec.Meta(ge=1, le=65535)]
Fraction = Annotated[float, msgspec.Meta(gt=0, le=1)]


class SettingsError(ValueError):
    """A setting in the environment is malformed or out of bounds; the message names the variable. `serve` prints
    it and exits with status 2."""


@dataclass(frozen=True, slots=True)
class Env:
    """One setting's environment variable and its line of documentation. ``parse`` replaces the by-type parser
    for values with a vocabulary of their own (``off``, ``python``, a list); ``fallback`` computes the default at
    read time when it depends on the machine (CPU count, an installed binary), and ``default_doc`` then says what
    the documentation shows as the default."""

    name: str
    doc: str
    parse: Callable[[str], Any] | None = None
    fallback: Callable[[], Any] | None = None
    default_doc: str | None = None


@dataclass(frozen=True, slots=True)
class EnvFields:
    """Read a Struct that is not a settings class (a wire type such as ``Budget``) from one variable per field."""

    fields: Mapping[str, Env]


RENAMED: dict[str, str] = {
    "CONDUCTOR_BACKOFF_BASE_S": "CONDUCTOR_REDELIVERY_BACKOFF_BASE_S (executor) or CONDUCTOR_RETRY_BACKOFF_BASE_S "
    "(worker-adapter)",
    "CONDUCTOR_BACKOFF_MAX_S": "CONDUCTOR_REDELIVERY_BACKOFF_MAX_S (executor) or CONDUCTOR_RETRY_BACKOFF_MAX_S "
    "(worker-adapter)",
}
"""Names that meant two things and were split: setting one is refused at start-up rather than silently ignored."""


def boolean(raw: str) -> bool:
    value = raw.strip().lower()
    if value in TRUE:
        return True
    if value in FALSE:
        return False
    raise ValueError(f"expected one of {'/'.join(sorted(TRUE))} or {'/'.join(sorted(FALSE))}")


def number(kind: type[int] | type[float], raw: str) -> int | float:
    """The one number parser: a plain decimal integer, or a finite float."""
    try:
        value = kind(raw.strip())
    except ValueError:
        raise ValueError(f"not {'an integer' if kind is int else 'a number'}") from None
    if not math.isfinite(value):
        raise ValueError("not a finite number")
    return value


def lowercase(raw: str) -> str:
    """For settings that are one word of a fixed vocabulary (the bound's pattern lists it)."""
    return raw.strip().lower()


def listing(sep: str = ",") -> Callable[[str], tuple[str, ...]]:
    """A ``sep``-separated list; blanks dropped."""
    return lambda raw: tuple(p.strip() for p in raw.split(sep) if p.strip())


def tenant_list(raw: str) -> tuple[str, ...]:
    """Extra tenants' names, checked as conductor/access.py checks them (one subject token each, no role's)."""
    from conductor.access import tenants  # the one rule for tenant names

    return tenants(listing()(raw))


def tenant_name(raw: str) -> str:
    """One tenant's name: ``client``, ``gateway`` or an extra tenant's."""
    from conductor.access import CLIENT, GATEWAY

    name = raw.strip()
    return name if name in (CLIENT, GATEWAY) else tenant_list(name)[0]


def _strip_annotated(hint: Any) -> tuple[Any, list[Any]]:
    extras: list[Any] = []
    while typing.get_origin(hint) is Annotated:
        extras.extend(hint.__metadata__)
        hint = hint.__origin__
    return hint, extras


def _base(hint: Any) -> tuple[Any, bool]:
    """The type a raw value is parsed as, and whether None is allowed."""
    hint, _ = _strip_annotated(hint)
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        return _strip_annotated(args[0])[0], True
    return hint, False


def _parse(hint: Any, raw: str) -> Any:
    kind, _ = _base(hint)
    if kind is bool:
        return boolean(raw)
    if kind in (int, float):
        return number(kind, raw)
    if kind is Path:
        return Path(raw.strip())
    if kind is str or typing.get_origin(kind) is typing.Literal:  # a Literal's choices: msgspec checks them
        return raw.strip()
    raise TypeError(f"no parser for {kind!r}; give the Env a parse=")


def _value(hint: Any, spec: Env, raw: str) -> Any:
    try:
        value = spec.parse(raw) if spec.parse is not None else _parse(hint, raw)
        return msgspec.convert(value, hint)  # the bound: msgspec.Meta on the field's type
    except (ValueError, msgspec.ValidationError) as exc:
        reason = str(exc).removesuffix(" - at `$`")
        raise SettingsError(f"{spec.name}={raw!r}: {reason}") from None


def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls, include_extras=True)


def _marker(hint: Any, kind: type) -> Any:
    return next((m for m in _strip_annotated(hint)[1] if isinstance(m, kind)), None)


def _is_settings(hint: Any) -> bool:
    kind = _strip_annotated(hint)[0]
    return (
        isinstance(kind, type)
        and issubclass(kind, msgspec.Struct)
        and any(_marker(h, Env) or _marker(h, EnvFields) or _is_settings(h) for h in _hints(kind).values())
    )


def read(cls: type[S], env: Mapping[str, str] | None = None) -> S:
    """``cls`` from the environment (``os.environ`` when None); see the module docstring."""
    env = os.environ if env is None else env
    for old, new in RENAMED.items():
        if env.get(old):
            raise SettingsError(f"{old} is no longer read: it meant two things; set {new}")
    return _read(cls, env)


def _read(cls: type[S], env: Mapping[str, str]) -> S:
    values: dict[str, Any] = {}
    for name, hint in _hints(cls).items():
        if (spec := _marker(hint, Env)) is not None:
            raw = env.get(spec.name, "")
            if raw.strip():
                values[name] = _value(hint, spec, raw)
            elif spec.fallback is not None:
                values[name] = spec.fallback()
        elif (group := _marker(hint, EnvFields)) is not None:
            kind = _strip_annotated(hint)[0]
            sub = _hints(kind)
            given = {
                f: _value(sub[f], e, env[e.name])
                for f, e in group.fields.items()
                if env.get(e.name, "").strip()
            }
            values[name] = kind(**given)
        elif _is_settings(hint):
            values[name] = _read(_strip_annotated(hint)[0], env)
    return cls(**values)


@dataclass(frozen=True, slots=True)
class SettingDoc:
    """One row of docs/settings.md."""

    env: str
    field: str  # dotted path inside the settings class, e.g. "intake.backoff_base_s"
    type: str
    default: str
    bound: str
    doc: str


def settings_table(cls: type) -> Iterator[SettingDoc]:
    """Every setting ``cls`` reads, recursively, in declaration order."""
    yield from _rows(cls, "", _read(cls, {}))


def _rows(cls: type, path: str, instance: Any) -> Iterator[SettingDoc]:
    for name, hint in _hints(cls).items():
        default = getattr(instance, name)
        if (spec := _marker(hint, Env)) is not None:
            yield _row(spec, path + name, hint, default)
        elif (group := _marker(hint, EnvFields)) is not None:
            sub = _hints(_strip_annotated(hint)[0])
            for field, e in group.fields.items():
                yield _row(e, f"{path}{name}.{field}", sub[field], getattr(default, field))
        elif _is_settings(hint):
            yield from _rows(_strip_annotated(hint)[0], f"{path}{name}.", default)


def _row(spec: Env, path: str, hint: Any, default: Any) -> SettingDoc:
    kind, optional = _base(hint)
    shown = spec.default_doc or ("unset" if default is None else _show(default))
    type_name = getattr(kind, "__name__", str(kind)).replace("Path", "path")
    return SettingDoc(
        spec.name, path, type_name + (" or unset" if optional else ""), shown, _bound(hint), spec.doc
    )


def _show(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple):
        return ",".join(map(str, value)) or "(empty)"
    return str(value) if value != "" else "(empty)"


def _bound(hint: Any) -> str:
    inner = _unwrap_optional(hint)
    items = (
        [a for a in typing.get_args(inner) if a is not Ellipsis] if typing.get_origin(inner) is tuple else []
    )
    metas = [
        m for h in (hint, inner, *items[:1]) for m in _strip_annotated(h)[1] if isinstance(m, msgspec.Meta)
    ]
    parts: list[str] = []
    for meta in metas:
        for key, sign in (("ge", "≥"), ("gt", ">"), ("le", "≤"), ("lt", "<")):
            if getattr(meta, key) is not None:
                parts.append(f"{sign} {getattr(meta, key)}")
        if meta.pattern is not None:
            parts.append(f"matches `{meta.pattern}`")
    return ("each item " if items and parts else "") + ", ".join(parts)


def _unwrap_optional(hint: Any) -> Any:
    hint, _ = _strip_annotated(hint)
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return next(a for a in typing.get_args(hint) if a is not type(None))
    return hint


DEFAULT_NATS_URL = "nats://127.0.0.1:4222"
DEFAULT_METRICS_PORT = 9464  # the OpenTelemetry Prometheus exporter's port


def metrics_port(value: str | None) -> int | None:
    """``CONDUCTOR_METRICS_PORT``: ``0`` or ``off`` (like unset or empty) mean no HTTP endpoint."""
    if value is None or value.strip().lower() in {"", "0", *FALSE}:
        return None
    return int(number(int, value))


MAX_PAYLOAD_BYTES = Env(
    "CONDUCTOR_MAX_PAYLOAD_BYTES",
    "Requests larger than this get a `payload_too_large` reply (the verifier has its own).",
)
MAX_STEPS_CAP = Env(
    "CONDUCTOR_MAX_STEPS_CAP",
    "The most steps a request may ask for (`max_steps`); the paper's default is 5. Read by the executor and the "
    "planner, which must agree.",
)


class CommonSettings(msgspec.Struct, frozen=True, kw_only=True):
    """What every service reads."""

    nats_url: Annotated[
        str,
        Env(
            "NATS_URL",
            "The NATS server to connect to; a user in it (`nats://user:password@host`) is used as is.",
        ),
    ] = DEFAULT_NATS_URL
    nats_credentials: Annotated[
        Path | None,
        Env(
            "CONDUCTOR_NATS_CREDENTIALS",
            "A file (mode 0600) of `NATS_PASSWORD_<USER>=...` lines: each service connects as its own NATS user, "
            "clients as `client` (conductor/credentials.py). The embedded nats-server writes one per run; "
            "ignored when NATS_URL names a user.",
        ),
    ] = None
    nats_user: Annotated[
        str | None,
        Env(
            "CONDUCTOR_NATS_USER",
            "The tenant a client (`conductor solve`, `result`, `eval`, `status`) connects as with the credentials "
            "file; unset: `client`. Services always connect as their own role (docs/tenancy.md).",
            parse=tenant_name,
        ),
    ] = None
    tenants: Annotated[
        tuple[str, ...],
        Env(
            "CONDUCTOR_TENANTS",
            "Tenants besides `client` and the gateway (comma-separated): the embedded nats-server of `serve "
            "--embedded-nats`/`demo`/`eval` makes each a user that reads only its own tasks (docs/tenancy.md).",
            parse=tenant_list,
        ),
    ] = ()
    log_level: Annotated[
        str,
        msgspec.Meta(pattern="^(?i:debug|info|warning|error|critical)$"),
        Env("CONDUCTOR_LOG_LEVEL", "Log level."),
    ] = "INFO"
    log_json: Annotated[
        bool | None, Env("CONDUCTOR_LOG_JSON", "JSON log lines; unset: JSON when stderr is not a terminal.")
    ] = None
    subject_prefix: Annotated[
        str,
        Env(
            "CONDUCTOR_SUBJECT_PREFIX", "Prepended to every subject, stream and bucket name (tenants, tests)."
        ),
    ] = ""
    pool_file: Annotated[
        Path | None, Env("CONDUCTOR_POOL", "The pool file (TOML); unset: the bundled demo pool.")
    ] = None
    max_payload_bytes: Annotated[Count, MAX_PAYLOAD_BYTES] = 1_048_576
    request_timeout_s: Annotated[
        PositiveSeconds,
        Env("CONDUCTOR_REQUEST_TIMEOUT_S", "How long a service waits on another service's reply."),
    ] = 600.0
    # FastStream's NATS default is 1 (strictly sequential), which would serialise every task in an executor.
    handler_concurrency: Annotated[
        Count, Env("CONDUCTOR_HANDLER_CONCURRENCY", "Messages a service handles at once (per subscriber).")
    ] = 1024
    drain_timeout_s: Annotated[
        Seconds,
        Env(
            "CONDUCTOR_DRAIN_TIMEOUT_S",
            "On shutdown, how long in-flight handlers may finish before cancellation.",
        ),
    ] = 30.0
    # None (library use, tests) serves nothing; `conductor serve` defaults it to DEFAULT_METRICS_PORT.
    metrics_port: Annotated[
        Port | None,
        Env(
            "CONDUCTOR_METRICS_PORT",
            "HTTP port of /metrics, /healthz and /readyz; `0` or `off` serves none.",
            parse=metrics_port,
            default_doc=f"{DEFAULT_METRICS_PORT} under `conductor serve` (a free one if taken), none otherwise",
        ),
    ] = None
    # Probes come from the kubelet and scrapes from Prometheus: not only localhost.
    metrics_host: Annotated[str, Env("CONDUCTOR_METRICS_HOST", "Address the HTTP endpoint binds.")] = (
        "0.0.0.0"
    )

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> CommonSettings:
        return read(cls, env)

    def subject(self, name: str) -> str:
        return f"{self.subject_prefix}{name}" if self.subject_prefix else name
