"""The task registry's error vocabulary: bad task input, named once where it is seen.

Each is a ``ValueError`` whose message names the thing at fault — the registry entry, the file (and line), the
split — so ``conductor eval`` and ``conductor train`` print it as one line and stop before any work.
"""

from __future__ import annotations


class TaskError(ValueError):
    """Bad task input."""


class DatasetError(TaskError):
    """A record does not match its source's format (or fails a load-time check); the message names file and row."""


class UnknownTaskError(TaskError):
    """A registry entry (or a split of one) the registry does not know; the message lists the known ones."""


class MissingDataError(TaskError):
    """A data file (fixture or local copy) that does not exist, or a Hub copy that cannot be fetched."""
