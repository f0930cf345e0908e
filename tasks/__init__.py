"""The tasks training and evaluation both read: one registry of named sources (tasks/registry.py).

A source is the generated ``sim`` family, a benchmark's published records (a shipped fixture, a local copy or the
Hub copy), or a user's own JSONL file; each loads as ``Problem``s — the question a solver is asked (its harness's
answer-format instruction included) and the ``Reference`` the verifier scores it against. The learner draws its
training mix from here (``[[data.tasks]]``), ``conductor eval`` its benchmarks. This is a foundation package: it
imports ``schemas`` and the ``conductor`` foundation only, never a service or ``evaluation``.
"""

from tasks.errors import DatasetError, MissingDataError, TaskError, UnknownTaskError
from tasks.problem import Problem

__all__ = ["DatasetError", "MissingDataError", "Problem", "TaskError", "UnknownTaskError"]
