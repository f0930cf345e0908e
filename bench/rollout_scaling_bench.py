"""Rollouts per second as executor replicas grow 1 -> 4, with 1 s sim workers (issue 12): the scaling curve.

Services as real processes on a secured nats-server (bench/rollout_fleet.py): one process serving the
worker-adapter and the verifier, and executor processes, one more before each round (the earlier ones keep
serving). The learner's own client path (``RolloutClient`` over ``nats_transport``, as the ``learner`` user) scores
the same ``ROLLOUTS`` rollouts each round, every batch sent at once: sim train questions (math and mcq) with
parseable completions of 1, 2 and 3 chained steps, every worker call taking ``LATENCY_S``, so a rollout holds one
of its executor's slots for 2 s on average and is then verified for real.

What is scaled: each executor runs at most ``SLOTS`` rollouts at once (``CONDUCTOR_INTAKE_CONCURRENCY``, the bound
rollouts share with durable tasks; unset, it is the pool's summed worker concurrency — 640 for the sim pool — and
one replica would take everything, bounded only by CPU). Every other bound is set far above the load: worker
concurrency 10,000 per worker (deployment-wide), the worker-adapter's 1,024 handlers, the learner's requests in
flight. The ideal is then replicas x SLOTS / (mean steps x LATENCY_S) rollouts/s.

Two batch sizes, back to back at each replica count: the learner's default (``rollout.batch_size`` 16: 10 requests
a round) and 2 (80 requests). Placement is the learner's default, ``rollout.placement = "pull"`` (issue 18, item 8):
each rollout is a work item that a replica fetches only when it has a free slot, so no replica idles while another
has rollouts waiting; and the learner sends a step's rollouts longest first (``rollout.order``, by the worker calls
each completion's workflow makes), so a round's last slot-holders are short ones. ``--order as_given`` measures the
order the rollouts came in (1, 2, 3 steps cycling). ``--placement queue`` measures the earlier path: the queue group hands each request to a
random member whatever its load, a batch that lands on a full replica waits for its slots while another may idle,
and a round ends when its busiest replica does. Printed per batch size and replica count: the rate, its ratio to
one replica measured in the same run, its fraction of the ideal, the busiest replica's share of the round's steps
(beside its mean under random placement of the same requests, simulated, and the even 1 / replicas: under random
placement one round's luck is large at 10 requests), rollouts that came back unscored, and CPU ms per rollout by
process. Printed, not asserted; the last line is one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import heapq
import json
import random
import statistics
import sys
import time
from pathlib import Path

import msgspec

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._harness import cpu_s, tempdir
from bench.rollout_fleet import RolloutFleet, sim_rollouts
from services.learner.config import RolloutSection

LATENCY_S = 1.0  # every worker call
STEPS = (1, 2, 3)  # chained steps of the i-th rollout, cycling
SLOTS = 8  # rollouts one executor runs at once: the scaled bound
REPLICAS = (1, 2, 3, 4)
ROLLOUTS = 160  # per round: 40 s of work for one replica at the ideal rate, 10 s for four
BATCHES = (16, 2)  # rollouts per request: the learner's default (10 requests a round), and a small size (80)
WARM_UP = 16
BOUND = (
    f"scaled: executor rollout slots, {SLOTS} per replica (CONDUCTOR_INTAKE_CONCURRENCY); not binding: worker "
    "concurrency 10000 per worker, worker-adapter handlers 1024, the learner's requests (all sent at once)"
)


class Round(msgspec.Struct, kw_only=True):
    batch_size: int
    replicas: int
    rollouts_per_s: float
    ratio_vs_1: float = 0.0  # against one replica, same batch size, this run
    fraction_of_ideal: float  # of replicas x SLOTS / (mean steps x LATENCY_S)
    wall_s: float
    busiest_share: float  # of the round's steps, by the busiest replica (even: 1 / replicas)
    expected_busiest_share: float  # the mean under random placement of these requests (simulated)
    in_order_bound: float  # the best ratio vs 1 replica when rollouts start in the order sent (simulated)
    unscored: int  # rollouts that came back with reward None
    cpu_ms_per_rollout: dict[str, float]


def in_order_bound(replicas: int, n: int, order: str) -> float:
    """The best ratio to one replica any placement gets when rollouts start in the order they were sent, each as
    soon as a slot anywhere is free (what pulling does): the rounds' makespans under that list schedule. A round
    ends with its last rollouts, started near its end: up to ``max(STEPS)`` long as given, the shortest when sent
    longest first. The shorter the round, the further this falls below ``replicas``."""
    durations = [STEPS[i % len(STEPS)] * LATENCY_S for i in range(n)]
    if order == "longest_first":
        durations.sort(reverse=True)

    def makespan(slots: int) -> float:
        free = [0.0] * slots
        for d in durations:
            heapq.heapreplace(free, free[0] + d)
        return max(free)

    return makespan(SLOTS) / makespan(replicas * SLOTS)


def expected_busiest(batch_size: int, replicas: int, n: int, trials: int = 4000) -> float:
    """The busiest replica's mean share of the steps when each request goes to a uniformly random replica, as a
    NATS queue group sends it: what a round at this batch size should see, lucky or not."""
    weights = [
        sum(STEPS[i % len(STEPS)] for i in range(b, min(b + batch_size, n))) for b in range(0, n, batch_size)
    ]
    rng, total, shares = random.Random(0), sum(weights), 0.0
    for _ in range(trials):
        load = [0] * replicas
        for w in weights:
            load[rng.randrange(replicas)] += w
        shares += max(load) / total
    return shares / trials


def cpu(fleet: RolloutFleet) -> dict[str, float]:
    """CPU seconds so far: the executors together, the worker-adapter + verifier process, this (learner) process."""
    assert fleet.helpers is not None and fleet.helpers.proc is not None
    return {
        "executors": sum(cpu_s(e.proc.pid) for e in fleet.executors if e.proc is not None),
        "worker_adapter_verifier": cpu_s(fleet.helpers.proc.pid),
        "learner": time.process_time(),
    }


async def measure(
    fleet: RolloutFleet, batch_size: int, replicas: int, placement: str, order: str, n: int
) -> Round:
    """One round: every batch sent at once (the learner's ``concurrency`` covers them all)."""
    section = RolloutSection(
        placement=placement,
        order=order,
        batch_size=batch_size,
        concurrency=-(-n // batch_size),
        timeout_s=300.0,
    )
    rollouts = sim_rollouts(n, steps=STEPS, tag=f"x{replicas}-{batch_size}-")
    steps0, cpu0 = [fleet.steps_done(i) for i in range(replicas)], cpu(fleet)
    async with fleet.learner(section) as client:
        started = time.perf_counter()
        results = await client.score(rollouts)
        wall = time.perf_counter() - started
    cpu1 = cpu(fleet)
    steps = [fleet.steps_done(i) - steps0[i] for i in range(replicas)]
    rate = len(results) / wall
    return Round(
        batch_size=batch_size,
        replicas=replicas,
        rollouts_per_s=round(rate, 2),
        fraction_of_ideal=round(rate * statistics.fmean(STEPS) * LATENCY_S / (replicas * SLOTS), 3),
        wall_s=round(wall, 1),
        busiest_share=round(max(steps) / sum(steps), 3),
        expected_busiest_share=round(expected_busiest(batch_size, replicas, n), 3),
        in_order_bound=round(in_order_bound(replicas, n, order), 2),
        unscored=sum(r.reward is None for r in results),
        cpu_ms_per_rollout={k: round((cpu1[k] - cpu0[k]) * 1e3 / len(results), 2) for k in cpu0},
    )


def line(r: Round) -> str:
    cpu_ms = " + ".join(f"{v:.1f}" for v in r.cpu_ms_per_rollout.values())
    return (
        f"{r.batch_size:>5} {r.replicas:>8} {r.rollouts_per_s:>10.2f} {r.ratio_vs_1:>7.2f} "
        f"({1 / r.expected_busiest_share:.2f}, {r.in_order_bound:.2f}) {r.fraction_of_ideal:>8.2f} {r.busiest_share:>9.2f} "
        f"({r.expected_busiest_share:.2f}, {1 / r.replicas:.2f}) {r.unscored:>8}   {cpu_ms}"
    )


async def main(placement: str, order: str, n: int, batches: tuple[int, ...]) -> dict[str, object]:
    fleet = RolloutFleet(
        tempdir(),
        latency_s=LATENCY_S,
        worker_concurrency=10_000,
        executor_env={"CONDUCTOR_INTAKE_CONCURRENCY": str(SLOTS)},
    )
    rounds: list[Round] = []
    try:
        fleet.start()
        for replicas in REPLICAS:
            fleet.add_executors(replicas - len(fleet.executors))
            if replicas == REPLICAS[0]:  # imports, connections, the verifier's first calls
                async with fleet.learner(RolloutSection(placement=placement, batch_size=4)) as client:
                    await client.score(sim_rollouts(WARM_UP, steps=STEPS, tag="warm-"))
            for batch_size in batches:  # both sizes back to back, under the same load
                rounds.append(await measure(fleet, batch_size, replicas, placement, order, n))
                print(
                    f"measured: batch {batch_size}, {replicas} executor(s), {rounds[-1].wall_s} s", flush=True
                )
    finally:
        fleet.stop()
    base = {r.batch_size: r.rollouts_per_s for r in rounds if r.replicas == REPLICAS[0]}
    for r in rounds:
        r.ratio_vs_1 = round(r.rollouts_per_s / base[r.batch_size], 2)
    print(
        f"{n} rollouts a round of {'/'.join(map(str, STEPS))} chained {LATENCY_S:g} s worker calls, placement "
        f"{placement}, sent {order.replace('_', ' ')}; {BOUND}"
    )
    print(
        "(random): the mean under random placement of the same requests; vs 1 replica (random) = 1 / that share; "
        "(in order): the best vs 1 replica when rollouts start in the order sent"
    )
    print(
        "batch replicas rollouts/s  vs 1 replica        of ideal  busiest share unscored   CPU ms/rollout: "
        "executors + worker-adapter/verifier + learner"
    )
    print("                          (random, in order)            (random, even)")
    for r in sorted(rounds, key=lambda r: (-r.batch_size, r.replicas)):
        print(line(r))
    out: dict[str, object] = {
        "bench": "rollout_scaling",
        "placement": placement,
        "order": order,
        "worker_latency_s": LATENCY_S,
        "steps": list(STEPS),
        "rollouts": n,
        "slots_per_executor": SLOTS,
        "bound": BOUND,
    }
    for b in batches:
        mine = sorted((r for r in rounds if r.batch_size == b), key=lambda r: r.replicas)
        out[f"batch_{b}.rollouts_per_s"] = [r.rollouts_per_s for r in mine]
        out[f"batch_{b}.ratio_vs_1_replica"] = [r.ratio_vs_1 for r in mine]
        out[f"batch_{b}.fraction_of_ideal"] = [r.fraction_of_ideal for r in mine]
        out[f"batch_{b}.busiest_share"] = [r.busiest_share for r in mine]
        out[f"batch_{b}.expected_busiest_share"] = [r.expected_busiest_share for r in mine]
        out[f"batch_{b}.expected_ratio_random_placement"] = [
            round(1 / r.expected_busiest_share, 2) for r in mine
        ]
        out[f"batch_{b}.in_order_bound"] = [r.in_order_bound for r in mine]
    out["rounds"] = msgspec.to_builtins(rounds)
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument(
        "--placement",
        choices=("pull", "queue"),
        default=RolloutSection().placement,
        help="how rollouts reach the executors (rollout.placement; default: the learner's)",
    )
    parser.add_argument(
        "--order",
        choices=("longest_first", "as_given"),
        default=RolloutSection().order,
        help="the order a round's rollouts are sent in (rollout.order; default: the learner's)",
    )
    parser.add_argument(
        "--rollouts", type=int, default=ROLLOUTS, help=f"rollouts a round (default {ROLLOUTS})"
    )
    parser.add_argument(
        "--batch", type=int, action="append", help=f"a batch size to measure (default {BATCHES})"
    )
    args = parser.parse_args()
    print(
        json.dumps(asyncio.run(main(args.placement, args.order, args.rollouts, tuple(args.batch or BATCHES))))
    )
