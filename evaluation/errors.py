"""The eval harness's error vocabulary: bad input, named once at the boundary that sees it.

Every one is a ``ValueError`` whose message names the thing at fault (the strategy or the service); ``conductor
eval`` prints it and exits 2, keeping every item already finished in ``items.jsonl``. Bad task input — an unknown
benchmark, a missing file, a malformed record — is the task registry's ``tasks.errors.TaskError`` (also a
``ValueError``), handled the same way.
"""

from __future__ import annotations


class EvalError(ValueError):
    """Bad input to an eval run."""


class UnknownStrategyError(EvalError):
    """A strategy that does not parse, or names a worker outside the pool."""


class ServiceUnreachableError(EvalError):
    """No NATS server, or nothing serving the solve subject on it."""
