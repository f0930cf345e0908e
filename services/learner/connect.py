"""Where rollouts are scored: a deployment's executors over NATS, through the learner's event-loop thread.

``remote`` connects to ``NATS_URL`` (the deployment's executors, workers and verifiers serve the rollout subject)
and hands the trainer a synchronous ``Scorer``. Starting those services in the training process instead (the laptop
path, `conductor train --local`, and the tests) is the application's job: ``conductor.app.training.local_rollouts``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import nats

from conductor.credentials import connection
from conductor.settings import CommonSettings
from services.learner.bridge import LoopThread
from services.learner.config import LearnerConfig
from services.learner.rewards import Scorer
from services.learner.rollouts import RolloutClient, rollout_transport


@contextlib.contextmanager
def remote(loop: LoopThread, config: LearnerConfig, settings: CommonSettings) -> Iterator[Scorer]:
    """Score over the deployment at ``settings.nats_url`` with its subject prefix."""
    conn = connection(settings, "learner")  # the learner's NATS user and inbox (conductor/access.py)
    nc = loop.run(nats.connect(conn.url, inbox_prefix=conn.inbox_prefix, name="conductor-learner"))
    client = RolloutClient(rollout_transport(nc, settings.subject_prefix, config.rollout), config.rollout)
    try:
        yield lambda rollouts: loop.run(client.score(rollouts))
    finally:
        loop.run(nc.close())
