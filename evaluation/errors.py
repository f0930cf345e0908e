"""The eval harness's error vocabulary: bad input, named once at the boundary that sees it.

Every one is a ``ValueError`` whose message names the thing at fault (the benchmark, strategy, file or service);
``conductor eval`` prints it and exits 2, keeping every item already finished in ``items.jsonl``. A malformed
record is ``evaluation.datasets.DatasetError`` (also a ``ValueError``), raised by the loaders.
"""

from __future__ import annotations


class EvalError(ValueError):
    """Bad input to an eval run."""


class UnknownBenchmarkError(EvalError):
    """A benchmark name the registry does not know."""


class UnknownStrategyError(EvalError):
    """A strategy that does not parse, or names a worker outside the pool."""


class MissingDataError(EvalError):
    """A data file (fixture or local override) that does not exist, or a Hub copy that cannot be fetched."""


class ServiceUnreachableError(EvalError):
    """No NATS server, or nothing serving the solve subject on it."""
