"""`conductor eval`: benchmarks × strategies × repeats through the services, the paper's table, results and report.

Like `conductor demo` (one code path, conductor/app/stack.py): with nothing reachable at ``NATS_URL`` it starts an
embedded nats-server and every service here; with services running there, it uses them. Bad input — an unknown
benchmark or strategy, a malformed record, a missing file, an unreachable service — is one line naming it and exit
code 2; items already finished stay in ``DIR/items.jsonl`` and a rerun with the same ``--out`` skips them.

The embedded planner's Conductor is resolved as ``serve`` resolves it (services/planner/resolution.py): the
registered policy covering the run's pool, else MoA, or ``--policy``; the line saying which is printed, and the
policy (name, version, adapter sha256, card) is recorded in ``results.json`` and in each `conductor` item, whose
resume key it is part of: resumed with another policy, those items run again.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import msgspec
import nats.errors
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from conductor.app.stack import local_stack
from conductor.client import ConductorClient
from conductor.money import usd
from conductor.natsserver import reachable
from conductor.policies import PolicyRecord
from conductor.pool import Pool, PoolError, load_pool
from conductor.settings import CommonSettings, SettingsError
from evaluation import routing, table
from evaluation.errors import EvalError, ServiceUnreachableError
from evaluation.records import ItemResult, Key
from evaluation.routers import RouterSpec
from evaluation.runner import Job, Options, Runner, plan
from evaluation.simanswers import run_pool
from evaluation.strategies import parse_strategies
from tasks import registry
from tasks.errors import TaskError

RUNNING_PLANNER = "the running services' planner (its policy is set where it runs; not recorded)"

BAD_INPUT = (EvalError, TaskError, PoolError, SettingsError)


def positive(text: str) -> int:
    """A whole number >= 1 (argparse prints the message and exits 2 otherwise)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def add_eval_command(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "eval", help="run benchmarks × strategies through the services; table, results, report"
    )
    p.add_argument(
        "--benchmark", required=True, help=f"comma-separated NAME[:SPLIT]: {', '.join(registry.names())}"
    )
    p.add_argument(
        "--strategy",
        default="conductor",
        help="comma-separated: conductor, single:NAME|*, moa[:K], "
        "refine[:N][@NAME], consensus[:N][@NAME], worker:NAME; +rN adds recursion rounds; routers (all six) or "
        "router:best|per-set|vote|cascade[:A+B>C]|knn|oracle, composed from every worker's single answers "
        "(docs/evaluation.md)",
    )
    p.add_argument("--repeats", type=positive, default=1)
    p.add_argument("--limit", type=positive, help="items per benchmark (a seeded sample)")
    p.add_argument(
        "--train-limit",
        type=positive,
        help="with routers: train items per benchmark they calibrate on (a seeded sample; default --limit, "
        "else the whole train split)",
    )
    p.add_argument("--concurrency", type=positive, default=8, help="items in flight at once")
    p.add_argument(
        "--pool",
        help="pool file for services started here (default: the sim pool's workers over the "
        "run's questions); with running services only its worker names are used",
    )
    p.add_argument("--pool-subset", help="comma-separated worker names: every request uses only these")
    p.add_argument(
        "--domains",
        help="comma-separated: keep only items of these domains (math, mcq, code), e.g. "
        "the domains a policy was trained on",
    )
    p.add_argument(
        "--hide-domain",
        action="store_true",
        help="ask without the items' answer type, as a client that names none does (a plain chat request to "
        "the gateway); the verifier still judges each item by its reference",
    )
    p.add_argument(
        "--policy",
        help="the embedded planner's CONDUCTOR_POLICY (e.g. smollm2-views3, a registered policy, or "
        "openai:conductor-7b); default: the registered policy covering the pool, else MoA (docs/policies.md)",
    )
    p.add_argument(
        "--data", action="append", default=[], metavar="NAME=PATH", help="a local copy of a benchmark"
    )
    p.add_argument(
        "--hub", action="store_true", help="load benchmarks from the Hugging Face Hub (needs datasets)"
    )
    p.add_argument("--cache", action="store_true", help="use the worker-call cache")
    p.add_argument("--durable", action="store_true", help="submit through the durable task queue")
    p.add_argument(
        "--embedded", action="store_true", help="always start a private NATS and the services here"
    )
    p.add_argument("--timeout", type=float, default=600.0, help="seconds per item")
    p.add_argument(
        "--out", required=True, help="output directory (items.jsonl, results.json/csv, report.html)"
    )
    p.set_defaults(func=cmd_eval)


def cmd_eval(args: argparse.Namespace) -> int:
    try:
        return run(args)
    except BAD_INPUT as exc:
        print(f"conductor eval: {exc}", file=sys.stderr)
        return 2


def split_names(text: str | None) -> list[str]:
    return [p.strip() for p in (text or "").split(",") if p.strip()]


def _data_paths(pairs: list[str]) -> dict[str, str]:
    bad = [p for p in pairs if "=" not in p]
    if bad:
        raise EvalError(f"--data expects NAME=PATH, got {bad[0]!r}")
    return dict(p.split("=", 1) for p in pairs)


def _pool(
    args: argparse.Namespace, env: dict[str, str], external: bool, out: Path, problems: dict
) -> tuple[Pool, Path | None]:
    """The run's pool and the file services started here load (None: running services keep theirs)."""
    if args.pool:
        path = Path(args.pool)
        return load_pool(path), path
    if external:
        return load_pool(Path(env["CONDUCTOR_POOL"]) if env.get("CONDUCTOR_POOL") else None), None
    path = run_pool(out / "pool", [p for items in problems.values() for p in items])
    return load_pool(path), path


def _in_domains(problems: dict[str, list], domains: list[str]) -> dict[str, list]:
    """Each benchmark's items of ``domains`` (all when none are named); a benchmark left empty is an error."""
    if not domains:
        return problems
    kept = {name: [p for p in items if p.domain in domains] for name, items in problems.items()}
    empty = [name for name, items in kept.items() if not items]
    if empty:
        raise EvalError(f"--domains {','.join(domains)}: no items left in {', '.join(empty)}")
    return kept


def _subset(pool: Pool, names: list[str]) -> list[str] | None:
    unknown = [n for n in names if n not in pool.names()]
    if unknown:
        raise EvalError(f"--pool-subset names worker(s) {unknown} not in the pool {pool.names()}")
    return names or None


@dataclass(frozen=True)
class Prepared:
    """Everything checked before any service starts: bad input fails here, fast."""

    out: Path
    env: dict[str, str]
    jobs: list[Job]
    benchmarks: list[str]
    versions: dict[str, str]  # benchmark -> its task version (tasks/registry.py), recorded with the results
    strategies: list[str]
    options: Options
    pool: Pool
    pool_file: Path | None
    embedded: bool
    routers: tuple[RouterSpec, ...] = ()  # composed after the run from every worker's single answers
    train_of: dict[str, str] | None = (
        None  # with routers: evaluated benchmark -> the train label calibrating it
    )
    policy_line: str = RUNNING_PLANNER  # "Conductor: <which> (<why>)" of the embedded planner


def prepare(args: argparse.Namespace) -> Prepared:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    problems = _in_domains(
        registry.load_all(split_names(args.benchmark), _data_paths(args.data), hub=args.hub),
        split_names(args.domains),
    )
    train = (
        _in_domains(routing.calibration(problems, hub=args.hub), split_names(args.domains))
        if routing.named(args.strategy)
        else {}
    )
    external = not args.embedded and reachable(CommonSettings.from_env(env).nats_url)
    pool, pool_file = _pool(args, env, external, out, {**problems, **train})
    subset = _subset(pool, split_names(args.pool_subset))
    workers = subset or pool.names()
    named, router_specs = routing.split_spec(args.strategy, workers)
    strategies = parse_strategies([*named, *(["single:*"] if router_specs else [])], workers)
    if args.policy:
        if external:
            raise EvalError(
                "--policy configures the embedded planner; the running planner's policy is set where it runs"
            )
        env["CONDUCTOR_POLICY"] = args.policy
    policy, policy_line = _policy(env, None if external else pool_file)
    options = Options(
        concurrency=args.concurrency,
        cache=args.cache,
        durable=args.durable,
        pool_subset=subset,
        timeout_s=args.timeout,
        hide_domain=args.hide_domain,
        policy=policy,
    )
    versions = {name: registry.version(name) for name in problems}
    jobs = plan(problems, strategies, max(args.repeats, 1), args.limit, versions)
    train_of = None
    if router_specs:
        train_of = {name: routing.train_label(name) for name in problems}
        singles = [s for s in strategies if s.label.startswith("single:")]
        train_versions = {label: registry.version(label) for label in train}
        jobs += plan(train, singles, 1, args.train_limit or args.limit, train_versions)
    return Prepared(
        out=out,
        env=env,
        jobs=jobs,
        benchmarks=list(problems),
        versions=versions,
        strategies=[s.label for s in strategies],
        options=options,
        pool=pool,
        pool_file=pool_file,
        embedded=args.embedded,
        routers=tuple(router_specs),
        train_of=train_of,
        policy_line=policy_line,
    )


def _policy(env: dict[str, str], pool_file: Path | None) -> tuple[PolicyRecord | None, str]:
    """The embedded planner's Conductor for ``pool_file`` (``env`` gets it), and the line saying which; None with
    running services (``pool_file`` None), whose planner chose its own."""
    if pool_file is None:
        return None, RUNNING_PLANNER
    from services.planner.resolution import resolve

    resolution = resolve({**env, "CONDUCTOR_POOL": str(pool_file)})
    env.update(resolution.env)
    return resolution.policy, resolution.line


def run(args: argparse.Namespace) -> int:
    started = time.monotonic()
    prep = prepare(args)
    done, new, where = asyncio.run(execute(prep, Console(stderr=True)))
    wide = Console() if Console().is_terminal else Console(width=180)  # a log file gets the whole table
    conclude(prep, done, new, where, time.monotonic() - started, wide)
    return 0


def conclude(
    prep: Prepared,
    done: dict[Key, ItemResult],
    new: list[ItemResult],
    where: str,
    wall: float,
    console: Console,
) -> table.Results:
    """This run's items (resumed and new, in job order) -> the table, results.json/csv and report.html."""
    merged = {**done, **{it.key: it for it in new}}
    items = [merged[j.key] for j in prep.jobs if j.key in merged]
    strategies = list(prep.strategies)
    routed: dict[str, str] = {}
    if prep.routers and prep.train_of:
        workers = prep.options.pool_subset or prep.pool.names()
        composed, routed = routing.compose(prep.routers, items, workers, prep.train_of)
        items += composed
        strategies += [r.label for r in prep.routers]
    items = [it for it in items if it.benchmark in prep.benchmarks]
    repeats = max((j.repeat for j in prep.jobs), default=0) + 1
    meta = {
        "pool": str(prep.pool_file or "the running services' pool"),
        "workers": ",".join(prep.pool.names()),
        "services": where,
        "repeats": str(repeats),
        "items": f"{len(new)} run, {len(done)} resumed",
        "wall": f"{wall:.1f}s",
    }
    if prep.options.pool_subset:
        meta["pool subset"] = ",".join(prep.options.pool_subset)
    if prep.options.hide_domain:
        meta["answer type"] = "hidden from the solve requests"
    meta.update(routed)
    meta["policy"] = _policy_meta(prep.options.policy)
    return finish(
        prep.out, items, prep.benchmarks, strategies, meta, console, prep.versions, prep.options.policy
    )


def _policy_meta(policy: PolicyRecord | None) -> str:
    if policy is None:
        return RUNNING_PLANNER
    version = f" v{policy.version}" if policy.version else ""
    digest = f", adapter {policy.adapter_sha256[:19]}" if policy.adapter_sha256 else ""
    return f"{policy.name}{version}{digest}"


async def execute(prep: Prepared, console: Console) -> tuple[dict[Key, ItemResult], list[ItemResult], str]:
    """(items resumed from an earlier run, items run now, where the services were)."""
    mode = "private" if prep.embedded else "auto"
    async with local_stack(prep.env, name="eval", mode=mode, pool=prep.pool_file) as stack:
        where = f"{'embedded' if stack.services_started else 'running'} services on {stack.settings.nats_url}"
        repeats = max((j.repeat for j in prep.jobs), default=0) + 1
        console.print(
            f"{where}: {len(prep.jobs)} items ({len(prep.benchmarks)} benchmarks × "
            f"{len(prep.strategies)} strategies × {repeats} repeats)"
        )
        console.print(prep.policy_line, markup=False, highlight=False)
        async with Connected(stack.settings) as client:
            runner = Runner(client, prep.out, prep.options)
            todo, done = runner.pending(prep.jobs)
            new = await _with_progress(runner, todo, list(done.values()), console)
    return done, new, where


def finish(
    out: Path,
    items: list[ItemResult],
    benches: list[str],
    strategies: list[str],
    meta: dict[str, str],
    console: Console,
    versions: dict[str, str] | None = None,
    policy: PolicyRecord | None = None,
) -> table.Results:
    results = table.with_aiq(table.summarize(items, benches, strategies, meta, versions))
    results = msgspec.structs.replace(results, policy=policy)
    table.write(results, out)
    from evaluation.report import write_report  # matplotlib: ~50 MiB that no `conductor serve` process needs

    report = write_report(out, results, items, title="Conductor eval")
    console.print(table.rich_table(results))
    console.print(
        f"{meta.get('items', '')} in {meta.get('wall', '')} · results: {out / 'results.json'}, "
        f"{out / 'results.csv'} · report: {report}"
    )
    return results


class Connected:
    """``ConductorClient`` whose failure to connect is the typed ``ServiceUnreachableError``."""

    def __init__(self, settings: CommonSettings) -> None:
        self._client = ConductorClient(settings)
        self._url = settings.nats_url

    async def __aenter__(self) -> ConductorClient:
        try:
            return await self._client.__aenter__()
        except (OSError, nats.errors.Error) as exc:
            raise ServiceUnreachableError(f"cannot connect to NATS at {self._url}: {exc}") from exc

    async def __aexit__(self, *exc: object) -> None:
        await self._client.__aexit__(*exc)


async def _with_progress(
    runner: Runner, todo: list[Job], done: list[ItemResult], console: Console
) -> list[ItemResult]:
    """The run, with a bar showing running accuracy and $ (resumed items included)."""
    seen = list(done)
    columns = (
        TextColumn("eval"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("acc {task.fields[acc]} · {task.fields[cost]}"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=console) as bar:
        task = bar.add_task("eval", total=len(todo) + len(done), completed=len(done), **_figures(seen))

        def on_item(item: ItemResult) -> None:
            seen.append(item)
            bar.update(task, advance=1, **_figures(seen))

        return await runner.run(todo, on_item)


def _figures(items: list[ItemResult]) -> dict[str, str]:
    acc = sum(it.correct for it in items) / len(items) if items else 0.0
    return {"acc": f"{100 * acc:.1f}%", "cost": usd(sum(it.cost_usd for it in items))}


__all__ = ["BAD_INPUT", "Connected", "add_eval_command", "cmd_eval", "finish", "positive", "split_names"]
