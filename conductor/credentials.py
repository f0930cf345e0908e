"""How a process connects to NATS as its own user: the user name, its password and its inbox prefix.

Three cases, in this order:
- ``NATS_URL`` carries a user (``nats://planner:secret@host``: the chart, an external server): that user, as given.
- ``CONDUCTOR_NATS_CREDENTIALS`` names a credentials file (the embedded nats-server of ``demo``/``serve all``/
  ``eval`` writes one per run): the process's own role, with the password the file holds for it (a client's
  "role" is its tenant: ``CONDUCTOR_NATS_USER``, else ``client``; docs/tenancy.md).
- neither: no credentials (a server without authorization, as most tests start).

Whatever the case, the connection's inbox prefix is ``_INBOX.<user>`` (the role when no user is given), the only
inbox the user may subscribe to (conductor/access.py).

The file has one ``NATS_PASSWORD_<USER>=<password>`` line per user — the key names of the chart's credentials
Secret — and must not be readable by group or others (it is refused otherwise, as ssh refuses a loose key).
"""

from __future__ import annotations

import os
import secrets
import stat
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, urlsplit, urlunsplit

from conductor.access import ROLES, inbox_prefix
from conductor.settings import CommonSettings


class CredentialsError(RuntimeError):
    """The credentials file is missing, readable by others, or has no password for the user."""


def password_key(user: str) -> str:
    """``NATS_PASSWORD_WORKER_ADAPTER`` for ``worker-adapter``: the chart Secret's key for a user's password."""
    return "NATS_PASSWORD_" + user.upper().replace("-", "_")


def generate(users: Iterable[str] = ROLES) -> dict[str, str]:
    """A fresh random password per user (256 bits each, URL-safe)."""
    return {user: secrets.token_hex(32) for user in users}


def write(path: Path, passwords: Mapping[str, str]) -> Path:
    """Write the file readable by its owner only (created 0600: never world-readable, not even for an instant)."""
    text = "".join(f"{password_key(user)}={pw}\n" for user, pw in passwords.items())
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        os.fchmod(fh.fileno(), 0o600)
        fh.write(text)
    return path


def read(path: Path) -> dict[str, str]:
    """``password_key(user) -> password`` from a credentials file."""
    try:
        mode = path.stat().st_mode
        text = path.read_text()
    except OSError as exc:
        raise CredentialsError(f"cannot read the NATS credentials file {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise CredentialsError(f"the NATS credentials file {path} is not text") from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise CredentialsError(f"{path} is readable by others (mode {stat.S_IMODE(mode):o}); chmod 600 it")
    pairs = (line.split("=", 1) for line in text.splitlines() if "=" in line and not line.startswith("#"))
    return {key.strip(): value.strip() for key, value in pairs}


REFUSALS = frozenset(
    {
        "authorization violation",
        "authorization timeout",
        "user authentication expired",
        "user authentication revoked",
    }
)
"""nats-server's words (``-ERR '...'``) for a connection whose user or password it does not accept."""


def refusal(exc: BaseException) -> str | None:
    """The server's words when ``exc`` is nats-server refusing the connection's credentials (retrying cannot help),
    else None."""
    reason = str(exc).removeprefix("nats: ").strip("'\" ")
    return reason if reason.lower() in REFUSALS else None


def user_of(settings: CommonSettings, role: str) -> str:
    """The user a process of ``role`` connects as: the URL's, else the role itself. Reads nothing."""
    return urlsplit(settings.nats_url).username or role


@dataclass(frozen=True, slots=True)
class Connection:
    """What to pass to ``nats.connect`` (``url`` may hold a password: log ``shown``)."""

    url: str
    inbox_prefix: str
    shown: str
    user: str


def redacted(url: str) -> str:
    """``url`` without its user and password, for logs and messages."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))


def connection(settings: CommonSettings, role: str) -> Connection:
    """The connection of a process of ``role`` (see the module docstring for the three cases)."""
    parts = urlsplit(settings.nats_url)
    user = parts.username or role
    shown = redacted(settings.nats_url)
    if parts.username or settings.nats_credentials is None:
        return Connection(settings.nats_url, inbox_prefix(user), shown, user)
    passwords = read(settings.nats_credentials)
    if not any(key.startswith("NATS_PASSWORD_") for key in passwords):
        raise CredentialsError(
            f"{settings.nats_credentials} is not a NATS credentials file (no NATS_PASSWORD_<USER>=... lines)"
        )
    password = passwords.get(password_key(role))
    if password is None:
        raise CredentialsError(f"{settings.nats_credentials} holds no password for the NATS user {role!r}")
    login = f"{quote(role, safe='')}:{quote(password, safe='')}"
    url = urlunsplit(parts._replace(netloc=f"{login}@{parts.netloc}"))
    return Connection(url, inbox_prefix(role), shown, role)
