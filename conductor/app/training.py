"""`conductor train`: the learner's pipeline in the foreground, with a progress bar (services/learner/).

The application layer's part of training: the command itself, and ``local_rollouts`` — the executor, planner,
worker-adapter and verifier started in the training process (on the learner's event-loop thread, with an embedded
nats-server unless a URL is given and the run's pool), for `conductor train --local`, the learning tests and the
bench. A service may not start other services (tests/conductor/test_import_graph.py), so this lives here; without
``--local`` the learner scores over the deployment at ``NATS_URL`` (services/learner/connect.py).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from conductor.app.runtime import create_services, running
from conductor.natsserver import NatsServer
from conductor.settings import CommonSettings

ROLLOUT_SERVICES = ("executor", "planner", "worker-adapter", "verifier")


@contextlib.contextmanager
def local_rollouts(
    loop: Any,
    config: Any,
    *,
    nats_url: str | None = None,
    prefix: str = "learner.",
    env: Mapping[str, str] | None = None,
) -> Iterator[Any]:
    """A ``Scorer`` over rollout services started here (and a nats-server unless ``nats_url``)."""
    from services.learner import connect
    from services.learner.stream import pool_file

    with contextlib.ExitStack() as stack:
        if nats_url is None:
            nats_url = stack.enter_context(NatsServer()).url
        full_env = {
            "NATS_URL": nats_url,
            "CONDUCTOR_SUBJECT_PREFIX": prefix,
            "CONDUCTOR_POOL": str(pool_file(config)),
            "CONDUCTOR_LOG_LEVEL": "WARNING",
            **(env or {}),
        }
        settings = CommonSettings.from_env(full_env)
        services = running(create_services(ROLLOUT_SERVICES, full_env), settings, name="learner-rollouts")
        loop.run(services.__aenter__())
        stack.callback(lambda: loop.run(services.__aexit__(None, None, None)))  # before the server stops
        with connect.remote(loop, config, settings) as score:
            yield score


def add_train_command(sub: Any) -> None:
    p = sub.add_parser(
        "train",
        help="train the Conductor policy from a config file, or reproduce a shipped one from its recipe",
    )
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--config", help="a learner TOML file, e.g. services/learner/presets/tiny-sim.toml")
    which.add_argument(
        "--recipe",
        help="a recipe's name (services/learner/presets/, e.g. smollm2-replay): every stage in order, each "
        "starting from the previous one's run under runs/<recipe>/",
    )
    p.add_argument(
        "--resume",
        action="store_true",
        help="continue the run in output.dir from its last checkpoint (a recipe: skip its finished stages)",
    )
    p.add_argument(
        "--local", action="store_true", help="start the rollout services (and NATS) in this process"
    )
    p.add_argument("--output-dir", help="override output.dir (not with --recipe: its stages' runs are fixed)")
    p.add_argument(
        "--data",
        action="append",
        default=[],
        metavar="NAME=PATH",
        help="the file of every [[data.tasks]] entry NAME (NAME:test=PATH: its held-out file)",
    )
    p.set_defaults(func=_cmd_train)


def _cmd_train(args: argparse.Namespace) -> int:
    import msgspec

    from services.learner.config import ConfigError, load_config, with_data
    from services.learner.recipes import load_recipe

    try:
        if args.recipe:
            if args.output_dir:
                raise ConfigError(
                    "--output-dir does not apply to a recipe: its stages run under runs/<recipe>/"
                )
            recipe = load_recipe(args.recipe)
            stages = [(s.name, with_data(s.config, args.data), s.finished) for s in recipe.stages]
        else:
            config = with_data(load_config(Path(args.config)), args.data)
            if args.output_dir:
                output = msgspec.structs.replace(config.output, dir=args.output_dir)
                config = msgspec.structs.replace(config, output=output)
            stages = [("", config, False)]
    except ConfigError as exc:
        print(f"conductor train: {exc}", file=sys.stderr)
        return 2
    summaries = {}
    for name, config, finished in stages:
        if args.resume and finished:
            print(
                f"conductor train: stage {name} finished earlier ({config.output.dir}); skipped",
                file=sys.stderr,
            )
            continue
        code, done = _train_one(config, args)
        if code:
            return code
        summaries[name or config.name] = _summary(done)
    print(json.dumps(summaries if args.recipe else next(iter(summaries.values())), indent=2, default=str))
    return 0


def _train_one(config: Any, args: argparse.Namespace) -> tuple[int, dict[str, Any]]:
    import os

    from services.learner import connect
    from services.learner.bridge import LoopThread
    from services.learner.config import ConfigError
    from services.learner.pipeline import RunExistsError, run
    from services.learner.rollouts import RolloutError
    from tasks.errors import TaskError

    with _Bar() as bar, LoopThread() as loop:
        try:
            if args.local:
                scorer = local_rollouts(loop, config)
            else:
                scorer = connect.remote(loop, config, CommonSettings.from_env(dict(os.environ)))
            with scorer as score:
                stages = run(
                    config,
                    score,
                    resume=args.resume,
                    progress=bar.update,
                    matrix=_offline_matrix(loop, config),
                )
        except (ConfigError, TaskError, RunExistsError, RolloutError) as exc:
            print(f"conductor train: {type(exc).__name__}: {exc}", file=sys.stderr)
            return 2, {}
    return 0, stages


def _offline_matrix(loop: Any, config: Any) -> Any:
    """The cascade stage's answer matrix computed in this process when its pool is all replay workers (a lookup
    each: conductor/app/replay_matrix.py), else None (through the rollout API)."""
    from conductor.app.replay_matrix import offline_matrix
    from services.learner.stream import load_run_pool

    if config.cold_start.cascade is None:
        return None
    pool = load_run_pool(config)
    if any(w.provider != "replay" for w in pool.workers):
        return None
    return lambda problems, pool, workers: loop.run(offline_matrix(problems, pool, workers))


def _summary(stages: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for name, figures in stages.items():
        held = figures.get("held_out") or {}
        out[name] = {"parse_rate": figures.get("parse_rate"), "held_out_reward": held.get("raw_reward_mean")}
    return out


class _Bar:
    """One rich progress bar per stage, the latest figures in its description; plain JSON lines into a log file."""

    def __enter__(self) -> _Bar:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self._progress = Progress(
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn()
        )
        self._progress.start()
        self._tasks: dict[str, Any] = {}
        return self

    def update(self, stage: str, step: int, total: int, figures: dict[str, Any]) -> None:
        if not self._progress.console.is_terminal:  # a log file (nohup): one plain line per update
            print(
                json.dumps({"stage": stage, "step": step, "total": total, **figures}, default=str), flush=True
            )
            return
        if stage not in self._tasks:
            self._tasks[stage] = self._progress.add_task(stage, total=max(total, 1))
        shown = ", ".join(f"{k} {v:.3g}" for k, v in figures.items() if isinstance(v, int | float))
        self._progress.update(self._tasks[stage], completed=step, description=f"{stage} {shown}"[:100])

    def __exit__(self, *exc: object) -> None:
        self._progress.stop()
