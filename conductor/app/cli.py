"""The `conductor` command: demo, solve (or submit durably), result, eval, policies, serve, verify, asyncapi,
settings."""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

import msgspec
from rich.console import Console

from conductor.settings import DEFAULT_METRICS_PORT, CommonSettings, SettingsError

if TYPE_CHECKING:
    from conductor.app.process import ProcessSettings
    from conductor.natsserver import NatsServer
    from conductor.service import Service


def _cmd_serve(args: argparse.Namespace) -> int:
    from conductor import tracing
    from conductor.app.process import run
    from conductor.app.runtime import UnknownServiceError
    from conductor.natsserver import NatsServer, reachable
    from services.gateway.keys import KeysFileError

    try:
        plan = _ServePlan.checked(args)
    except (UnknownServiceError, SettingsError, KeysFileError) as exc:
        print(f"conductor serve: {exc}", file=sys.stderr)
        return 2
    if plan.which is not None:  # said once the checks passed: a refusal stays one line
        print(f"conductor serve: {plan.which}", file=sys.stderr)
    env, server = plan.env, None
    if args.embedded_nats and not reachable(CommonSettings.from_env(env).nats_url):
        common = CommonSettings.from_env(env)  # a NATS user per service and tenant (conductor/access.py)
        server = NatsServer.secured(prefix=common.subject_prefix, tenants=common.tenants).start()
        env |= server.env()
    settings = CommonSettings.from_env(env)
    try:
        tracing.configure(tracing.TracingSettings.from_env(env), service="+".join(plan.names))
    except tracing.TracingError as exc:
        print(f"conductor serve: {exc}", file=sys.stderr)
        return 2
    # `serve` exposes /metrics and the probes by default; a port chosen explicitly must be free, the default
    # need not be (several local `serve` processes), see conductor/probes.py.
    port_chosen = "CONDUCTOR_METRICS_PORT" in env
    if not port_chosen:
        settings = msgspec.structs.replace(settings, metrics_port=DEFAULT_METRICS_PORT)
    try:
        run(_serve_until_stopped(plan, settings, server, strict_metrics_port=port_chosen), plan.process)
    finally:
        if server is not None:
            server.stop()
    return 0


@dataclass(frozen=True, slots=True)
class _ServePlan:
    """What `conductor serve` runs, every setting checked before anything starts: the services, the environment
    they read (the resolved Conductor's included), the process settings, and the line saying which Conductor."""

    names: list[str]
    env: dict[str, str]
    which: str | None
    process: ProcessSettings
    loop_kind: str
    services: list[Service]

    @classmethod
    def checked(cls, args: argparse.Namespace) -> _ServePlan:
        from conductor.app.process import ProcessSettings, loop_name
        from conductor.app.runtime import create_services, service_names

        env = dict(os.environ)
        if args.pool:
            env["CONDUCTOR_POOL"] = args.pool
        names = service_names(args.service)
        which = None
        if "planner" in names:  # the registered Conductor for the pool, where it can run (docs/policies.md)
            from services.planner.resolution import resolve

            resolution = resolve(env)
            env, which = resolution.env, resolution.line
        process = ProcessSettings.from_env(env)
        loop_kind = loop_name(process)
        services = create_services(names, env)
        return cls(names=names, env=env, which=which, process=process, loop_kind=loop_kind, services=services)


async def _serve_until_stopped(
    plan: _ServePlan, settings: CommonSettings, server: NatsServer | None, *, strict_metrics_port: bool
) -> None:
    """Run the services until SIGINT or SIGTERM; SIGUSR1 prints where every task waits (``dump_tasks``)."""
    from conductor.app.process import settle_gc
    from conductor.app.runtime import running

    stop, started = asyncio.Event(), asyncio.Event()
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()

    def on_signal() -> None:  # still starting (NATS unreachable, say): nothing to drain, stop waiting now
        if not stop.is_set() and not started.is_set() and task is not None:
            task.cancel()
        stop.set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, on_signal)
    loop.add_signal_handler(signal.SIGUSR1, dump_tasks)  # `kill -USR1 PID`: where is everything waiting?
    name = "+".join(plan.names)
    try:
        async with running(plan.services, settings, name=name, strict_metrics_port=strict_metrics_port):
            started.set()
            collector = settle_gc(plan.process)
            _say_serving(plan, settings, server)
            await stop.wait()  # SIGTERM: stop taking messages, finish in-flight ones, then exit
            if collector is not None:
                collector.cancel()
    except asyncio.CancelledError:
        if started.is_set() or not stop.is_set():
            raise
        print("conductor serve: stopped before the services started", file=sys.stderr)


def _say_serving(plan: _ServePlan, settings: CommonSettings, server: NatsServer | None) -> None:
    from conductor.credentials import redacted

    print(
        f"serving {', '.join(plan.names)} on {redacted(settings.nats_url)} ({plan.loop_kind} loop, gc thresholds "
        f"{plan.process.gc_thresholds or 'python'}); Ctrl-C to stop",
        file=sys.stderr,
        flush=True,
    )
    if server is not None:  # how `conductor solve` (or any client) gets in: as the user `client`
        clients = " ".join(f"{k}={v}" for k, v in server.env().items())
        print(f"clients: {clients}", file=sys.stderr, flush=True)
        if settings.tenants:  # each its own namespace (docs/tenancy.md)
            print(
                f"tenants: {' '.join(settings.tenants)} (as one: CONDUCTOR_NATS_USER=<tenant>)",
                file=sys.stderr,
                flush=True,
            )


def dump_tasks(file: TextIO | None = None) -> int:
    """Print every asyncio task with the chain of coroutines it is waiting in, innermost last, to stderr (a hung
    call shows where it waits); returns the number of tasks."""
    out = file or sys.stderr
    tasks = asyncio.all_tasks()
    print(f"--- {len(tasks)} asyncio tasks ---", file=out)
    for task in tasks:
        print(f"task {task.get_name()}:", file=out)
        for line in await_chain(task.get_coro()):
            print(f"    {line}", file=out)
    print("--- end of tasks ---", file=out, flush=True)
    return len(tasks)


def await_chain(coro: object) -> list[str]:
    """Where a suspended coroutine waits: its frame, then the frame of what it awaits, and so on down."""
    lines: list[str] = []
    while coro is not None and len(lines) < 64:
        frame = (
            getattr(coro, "cr_frame", None)
            or getattr(coro, "gi_frame", None)
            or getattr(coro, "ag_frame", None)
        )
        if frame is None:
            lines.append(f"awaiting {coro!r}"[:300])
            break
        lines.append(f"{frame.f_code.co_filename}:{frame.f_lineno} in {frame.f_code.co_name}")
        coro = (
            getattr(coro, "cr_await", None)
            or getattr(coro, "gi_yieldfrom", None)
            or getattr(coro, "ag_await", None)
        )
    return lines


def _bad_task_id(task_id: str | None) -> str | None:
    """Why ``task_id`` would never be accepted (its result could never be found), or None."""
    from services.executor.validation import TASK_ID_RULE, valid_task_id

    return None if task_id is None or valid_task_id(task_id) else TASK_ID_RULE


def _strategy(name: str | None, pool: list[str] | None, settings: CommonSettings | None = None):
    """``--policy`` through the one strategy grammar (conductor/strategy.py), in the names of the request's pool:
    ``--pool``, else the deployment's pool file (``settings.pool_file``: CONDUCTOR_POOL, else the bundled pool)."""
    from conductor.pool import load_pool
    from conductor.strategy import parse_strategy

    if name is None:
        return None
    if pool is None:
        pool = load_pool((settings or CommonSettings.from_env()).pool_file).names()
    return parse_strategy(name, pool)


def _cmd_solve(args: argparse.Namespace) -> int:
    import nats.errors
    import nats.js.errors as js_errors

    from conductor.app.render import result_view
    from conductor.client import ConductorClient, SolveTimeoutError
    from conductor.wire import encode
    from schemas.solve import ProgressEvent, SolveRequest

    console = Console(stderr=True)
    if (bad := _bad_task_id(args.task_id)) is not None:
        print(f"conductor solve: --task-id: {bad}", file=sys.stderr)
        return 2
    if args.max_steps is not None and args.max_steps < 1:  # 0 would otherwise read as "unset": 5 steps
        print(f"conductor solve: --max-steps: must be at least 1, not {args.max_steps}", file=sys.stderr)
        return 2
    if args.rounds < 0:
        print(f"conductor solve: --rounds: must be 0 or more, not {args.rounds}", file=sys.stderr)
        return 2
    pool = [p.strip() for p in args.pool.split(",")] if args.pool else None
    settings = CommonSettings.from_env()
    try:
        named = _strategy(args.policy, pool, settings)
    except ValueError as exc:  # StrategyError, or a pool file that does not load
        print(f"conductor solve: --policy: {exc}", file=sys.stderr)
        return 2
    req = SolveRequest(
        question=args.question,
        task_id=args.task_id,
        pool=pool,
        max_steps=args.max_steps if args.max_steps is not None else (named.max_steps if named else None),
        max_rounds=args.rounds or (named.max_rounds if named else 0),
        domain=args.domain,
        reference=args.reference,
        policy=named.policy if named else None,
    )

    def show(ev: ProgressEvent) -> None:
        if args.json:
            return
        if ev.kind == "planned":
            console.print(f"[cyan]round {ev.round}: {ev.steps_planned} step(s) planned[/]")
        elif ev.kind == "step_done":
            status = f"[red]{ev.error.code}[/]" if ev.error else "done"
            console.print(f"  step {ev.step} ({ev.worker}) {status}")

    async def main() -> int:
        async with ConductorClient(settings) as client:
            if args.detach:
                try:
                    print(await client.submit(req))  # the task id; fetch with `conductor result ID`
                except (nats.errors.NoRespondersError, nats.errors.TimeoutError, js_errors.Error) as exc:
                    print(f"conductor solve: {_submit_refused(exc, settings)}", file=sys.stderr)
                    return 2
                return 0
            try:
                result = await client.solve(req, timeout=args.timeout, on_progress=show)
            except SolveTimeoutError as exc:
                console.print(f"[red]{exc}[/]")
                return 3
        if args.json:
            sys.stdout.write(encode(result).decode() + "\n")
        else:
            Console().print(result_view(result))
        return 1 if result.error is not None and result.answer is None else 0

    return asyncio.run(main())


def _submit_refused(exc: Exception, settings: CommonSettings) -> str:
    """Why the durable queue did not take a task, in one line: a full JetStream store, no queue at all (no executor
    ever started on this prefix), or JetStream's own words."""
    import nats.errors
    import nats.js.errors as js_errors

    from conductor.client import store_full
    from schemas.tasks import Names

    queue = f"the durable task queue {Names.for_prefix(settings.subject_prefix).tasks_stream}"
    if isinstance(exc, js_errors.APIError):
        why = f"{exc.description or type(exc).__name__} (JetStream error {exc.err_code})"
        if store_full(exc):
            return f"{queue} refused the task: the NATS JetStream store is full: {why}"
        return f"{queue} refused the task: {why}"
    if isinstance(exc, js_errors.NoStreamResponseError | nats.errors.NoRespondersError):
        return f"{queue} does not exist (no executor started with this subject prefix, or JetStream is off)"
    return f"{queue} did not answer ({type(exc).__name__})"


def _cmd_result(args: argparse.Namespace) -> int:
    from conductor.app.render import result_view
    from conductor.client import ConductorClient, ResultNotReadyError
    from conductor.wire import encode

    if (bad := _bad_task_id(args.task_id)) is not None:
        print(f"conductor result: {bad}", file=sys.stderr)
        return 2

    async def main() -> int:
        async with ConductorClient(CommonSettings.from_env()) as client:
            try:
                result = await client.result(args.task_id, wait=args.wait)
            except ResultNotReadyError as exc:
                print(f"conductor result: {exc}", file=sys.stderr)
                return 4
        if args.json:
            sys.stdout.write(encode(result).decode() + "\n")
        else:
            Console().print(result_view(result))
        return 1 if result.error is not None else 0  # a task that failed is not a success for a script

    return asyncio.run(main())


def _cmd_status(args: argparse.Namespace) -> int:
    """Pods, replicas and readiness per service (Kubernetes) and the durable intake's lag (NATS)."""
    from conductor.app.status import Status, read_lag, table
    from conductor.kube import KubeError, api_client, workloads

    try:
        found = workloads(api_client(args.kubeconfig, args.context), args.namespace, args.release)
    except KubeError as exc:
        print(f"conductor status: {exc}", file=sys.stderr)
        return 2

    intake, error = (
        (None, "skipped (--no-nats)") if args.no_nats else asyncio.run(read_lag(CommonSettings.from_env()))
    )
    status = Status(
        namespace=args.namespace, release=args.release, workloads=found, intake=intake, intake_error=error
    )
    if args.json:
        sys.stdout.write(msgspec.json.encode(status).decode() + "\n")
    else:
        Console().print(table(status))
    return 0 if found and all(w.healthy for w in found) else 1


def _cmd_demo(args: argparse.Namespace) -> int:
    from conductor.app.demo import run_demo

    if args.replay or args.replay_pool:
        return _demo_replay(args)
    report = Path(args.report) if args.report else None
    return asyncio.run(
        run_demo(concurrency=args.concurrency, rounds=args.rounds, as_json=args.json, report_dir=report)
    )


def _demo_replay(args: argparse.Namespace) -> int:
    from conductor.app.demo_replay import run_replay_demo
    from tasks.errors import TaskError

    if args.report or args.rounds:
        print(
            "conductor demo: --replay takes neither --report nor --rounds (the card decides)", file=sys.stderr
        )
        return 2
    if not 1 <= args.per_set <= 50:
        print(f"conductor demo: --per-set must be 1-50, got {args.per_set}", file=sys.stderr)
        return 2
    pool = Path(args.replay_pool) if args.replay_pool else None
    try:
        return asyncio.run(
            run_replay_demo(
                pool_file=pool,
                per_set=args.per_set,
                seed=args.seed,
                concurrency=args.concurrency,
                as_json=args.json,
            )
        )
    except TaskError as exc:  # a missing or malformed replay table (CONDUCTOR_REPLAY_PATH)
        print(f"conductor demo: {exc}", file=sys.stderr)
        return 2


def _cmd_settings(args: argparse.Namespace) -> int:
    from conductor.app.settings_doc import settings_markdown

    text = settings_markdown()
    if args.output:
        with open(args.output, "w") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    return 0


def _cmd_asyncapi(args: argparse.Namespace) -> int:
    from conductor.app.asyncapi import asyncapi_document

    doc = asyncapi_document()
    text = msgspec.json.format(msgspec.json.encode(doc), indent=2).decode()
    if args.output:
        with open(args.output, "w", encoding="utf-8") as fh:
            fh.write(text + "\n")
    else:
        sys.stdout.write(text + "\n")
    return 0


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """Every command; for ``command="serve"`` only the service commands, all a `conductor serve` process parses:
    it then loads none of the other commands' modules (the eval's, the verifier's sandbox, the gateway's keys:
    ~4 MiB of every service process's memory). ``serve``'s arguments, help and errors are the same either way."""
    parser = argparse.ArgumentParser(prog="conductor", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    if command == "serve":
        _add_service_commands(sub)
        return parser
    _add_demo_command(sub)
    _add_solve_commands(sub)
    _add_service_commands(sub)
    from conductor.app.evaluate import add_eval_command

    add_eval_command(sub)
    from conductor.app.policies import add_policies_command

    add_policies_command(sub)
    from conductor.app.record import add_record_command

    add_record_command(sub)
    from services.verifier.cli import add_verify_command

    add_verify_command(sub)
    _add_learner_commands(sub)
    from services.gateway.cli import add_gateway_key_command

    add_gateway_key_command(sub)
    return parser


def _add_demo_command(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("demo", help="run everything locally and solve the bundled question set")
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--rounds", type=int, default=0, help="recursion rounds after the first")
    p.add_argument("--json", action="store_true", help="print results as JSON on stdout")
    p.add_argument(
        "--report", metavar="DIR", help="write the run's report.html here (default: a new temp dir)"
    )
    p.add_argument(
        "--replay",
        action="store_true",
        help="real models conducted offline: the 12-model replay pool on the replay-* test splits (docs/replay.md)",
    )
    p.add_argument(
        "--replay-pool", metavar="FILE", help="--replay on another replay pool, e.g. replay_pool_no_o1.toml"
    )
    p.add_argument("--per-set", type=int, default=5, help="--replay: questions per set (math-l5, gsm, crux)")
    p.add_argument(
        "--seed", type=int, default=0, help="--replay: which questions (the same seed, the same ones)"
    )
    p.set_defaults(func=_cmd_demo)


def _add_solve_commands(sub: argparse._SubParsersAction) -> None:
    """`solve` and `result`: a question in, a task's result out."""
    p = sub.add_parser("solve", help="send a question to conductor.solve and show the workflow and answer")
    p.add_argument("question")
    p.add_argument("--pool", help="comma-separated worker names (default: the whole pool)")
    p.add_argument("--rounds", type=int, default=0, help="recursion rounds after the first")
    p.add_argument("--max-steps", type=int)
    p.add_argument("--domain", help="answer-format hint: math, mcq, code, general")
    p.add_argument("--reference", help="ground truth; the result then carries a verdict")
    p.add_argument(
        "--policy",
        help="a strategy instead of the configured Conductor (conductor/strategy.py): moa, "
        "single:NAME, refine:3@NAME, consensus:5, worker:NAME, each with +rN",
    )
    p.add_argument("--task-id")
    p.add_argument("--timeout", type=float, default=600.0)
    p.add_argument("--json", action="store_true", help="print the SolveResult JSON")
    p.add_argument("--detach", action="store_true", help="submit durably (JetStream) and print the task id")
    p.set_defaults(func=_cmd_solve)

    p = sub.add_parser("result", help="fetch the stored result of a durable task")
    p.add_argument("task_id")
    p.add_argument("--wait", type=float, default=0.0, help="seconds to wait for it")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd_result)


def _add_service_commands(sub: argparse._SubParsersAction) -> None:
    """`serve`, `status` and the documents the services are described by (`asyncapi`, `settings`)."""
    p = sub.add_parser("serve", help="run one service, a comma-separated list, or all")
    p.add_argument(
        "service", help="executor, planner, worker-adapter, verifier, gateway, or all (every NATS service)"
    )
    p.add_argument("--pool", help="pool file (default: $CONDUCTOR_POOL or the bundled demo pool)")
    p.add_argument("--embedded-nats", action="store_true", help="start a nats-server when none is reachable")
    p.set_defaults(func=_cmd_serve)

    p = sub.add_parser("status", help="each service's pods, replicas and readiness, and the intake's lag")
    p.add_argument("--namespace", "-n", default="default")
    p.add_argument("--release", default="conductor", help="the Helm release name")
    p.add_argument("--kubeconfig", help="default: in-cluster credentials, else $KUBECONFIG or ~/.kube/config")
    p.add_argument("--context")
    p.add_argument("--no-nats", action="store_true", help="skip the intake lag (no NATS connection)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd_status)

    p = sub.add_parser("asyncapi", help="print the AsyncAPI document of the NATS API")
    p.add_argument("-o", "--output")
    p.set_defaults(func=_cmd_asyncapi)

    p = sub.add_parser("settings", help="print every setting (variable, default, bound, meaning) as Markdown")
    p.add_argument("-o", "--output")
    p.set_defaults(func=_cmd_settings)


def _add_learner_commands(sub: argparse._SubParsersAction) -> None:
    """`conductor train` (conductor/app/training.py); argparse only, torch is imported when it runs."""
    from conductor.app.training import add_train_command

    add_train_command(sub)


def main(argv: list[str] | None = None) -> int:
    """Exit status: 0 done; 1 the work ran and failed (an error result, a failed check); 2 refused before any
    work: bad input or configuration, NATS unreachable or refusing the credentials, nothing serving the request,
    a port in use, a full store; 3 a solve timed out; 4 no stored result yet; 5 `conductor record` stopped at its
    --budget-usd cap."""
    from conductor.client import DuplicateTaskError, NatsUnreachableError, NoExecutorError
    from conductor.credentials import CredentialsError
    from conductor.pool import PoolError
    from conductor.service import StartupError

    words = sys.argv[1:] if argv is None else argv
    args = build_parser(words[0] if words else None).parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except (
        NatsUnreachableError,
        NoExecutorError,
        CredentialsError,
        PoolError,
        StartupError,
        SettingsError,  # a malformed CONDUCTOR_* variable, read by any command (issue 34)
        DuplicateTaskError,
    ) as exc:
        print(f"conductor {args.command}: {exc}", file=sys.stderr)  # one line, never a traceback (issue 19)
        return 2


if __name__ == "__main__":
    sys.exit(main())
