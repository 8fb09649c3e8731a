"""Benchmark: how much do join strategies add to the plan space's headroom on Spark?

A Q2-like three-way join (TCP ⋈ UDP ⋈ SF on one host key, Q2 of
``examples/workload.toml``) on generated rounds of ``W = 1 s``, sized as in
``scripts/bench_engine_choice.py``: in each phase one stream is slow
(``--small`` tuples/s, the others ``--big``), the slow one rotating SF -> TCP
-> UDP, join keys uniform over ``--keys`` hosts.

Plans timed on every round:

- the three left-deep join orders, each left to Spark (no hint: Spark's own
  choice from its size estimates, with AQE as ``spark/session.py`` sets it):
  the plan space without strategies;
- in the best order, every combination of the two joins' strategies
  (broadcast left, broadcast right, shuffle-hash, sort-merge: 16 plans; 4
  with ``--uniform``, both joins alike). The best order is the unhinted order
  fastest in total over one warm-up pass of every round (not timed after).

Each round's frames are made once (``createDataFrame`` from pandas, not
cached, so Spark has no table statistics, as in a micro-batch). Each repeat
runs every plan once, in a fresh random order (interleaved), writing to
Spark's noop sink; a plan's time on a round is the median of its
``--repeats`` (at least 3). Printed: per round, the best order's unhinted time
against its fastest hinted plan; then the headroom, best fixed plan over the
fastest plan per round (totals over the rounds), without strategies (the
three unhinted orders) and with them (those and the hinted plans), and how
often a hinted plan beat Spark's unhinted choice in the same order by 10%.

    flock /tmp/cqopt-spark.lock python scripts/bench_strategies.py \\
        [--big 100000] [--small 5000] [--keys 20000] [--rounds-per-phase 2] [--repeats 3]
"""

from __future__ import annotations

import argparse
import itertools
import random
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_engine import bench_catalog, job_overhead  # noqa: E402
from bench_engine_choice import Q2_SQL, SLOW  # noqa: E402

from cqopt.optimizer.plans.builder import PlanBuilder, PlanShape  # noqa: E402
from cqopt.optimizer.plans.strategies import HINTED  # noqa: E402
from cqopt.optimizer.query.logical import parse_query  # noqa: E402
from cqopt.optimizer.rules.left_deep import join_orders  # noqa: E402
from cqopt.replay.trace_generate import generate_trace  # noqa: E402

STREAMS = ("TCP", "UDP", "SF")


def rounds_data(catalog, per_phase: int, big: float, small: float, keys: int, seed: int
                ) -> list[dict[str, pd.DataFrame]]:
    """Each round's tuples per stream: phase p has stream SLOW[p] at ``small`` tuples/s."""
    rounds = []
    for p, slow in enumerate(SLOW):
        frames = {}
        for i, name in enumerate(STREAMS):
            trace = generate_trace(catalog.stream(name), per_phase,
                                   seed=seed + 100 * i + p, rate_cv=0.05,
                                   mean_rate=small if name == slow else big,
                                   steady={"src_host": keys, "dest_host": keys})
            frames[name] = trace
        for r in range(per_phase):
            rounds.append({n: f[(f["ts"] >= r) & (f["ts"] < r + 1)].reset_index(drop=True)
                           for n, f in frames.items()})
    return rounds


def run_seconds(spark, plan, frames, query) -> float:
    from cqopt.spark.plan_frame import to_spark

    began = time.perf_counter()
    to_spark(plan, frames, query=query).write.format("noop").mode("overwrite").save()
    return time.perf_counter() - began


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--big", type=float, default=100_000, help="tuples/s of a fast stream")
    parser.add_argument("--small", type=float, default=5_000, help="tuples/s of the slow one")
    parser.add_argument("--keys", type=int, default=20_000, help="distinct join keys")
    parser.add_argument("--rounds-per-phase", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3, help="runs per plan and round (>= 3)")
    parser.add_argument("--uniform", action="store_true",
                        help="only the 4 plans whose two joins share a strategy")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--seed", type=int, default=17)
    args = parser.parse_args()
    if args.repeats < 3:
        parser.error("--repeats must be at least 3 (each figure is a median)")

    from cqopt.spark.session import spark_session

    catalog = bench_catalog(args.big, args.small)
    query = parse_query(Q2_SQL, catalog)
    builder = PlanBuilder(query)
    orders = join_orders(query)
    unhinted = {builder.build_shape(PlanShape(o)).id: builder.build_shape(PlanShape(o))
                for o in orders}
    data = rounds_data(catalog, args.rounds_per_phase, args.big, args.small, args.keys,
                       args.seed)
    spark = spark_session(args.master, progress=False,
                          conf={"spark.sql.shuffle.partitions": "2"})
    spark.sparkContext.setLogLevel("ERROR")
    rng = random.Random(args.seed)
    try:
        print(f"Spark {spark.version}, master {args.master}, AQE "
              f"{spark.conf.get('spark.sql.adaptive.enabled')}; per-job overhead (trivial "
              f"job, median of 7): {job_overhead(spark) * 1000:.0f} ms")
        print(f"Q2-like TCP ⋈ UDP ⋈ SF, {len(data)} rounds of 1 s ({args.rounds_per_phase} "
              f"per phase); fast streams {args.big:g}/s, the slow one {args.small:g}/s "
              f"(x{args.big / args.small:g}) rotating {' -> '.join(SLOW)}; keys uniform over "
              f"{args.keys}; {args.repeats} repeats, interleaved in random order")
        frames = [{n: spark.createDataFrame(f) for n, f in r.items()} for r in data]
        warm = {pid: sum(run_seconds(spark, plan, f, query) for f in frames)
                for pid, plan in unhinted.items()}
        best_order = unhinted[min(warm, key=warm.get)].join_order
        combos = [(s, s) for s in HINTED] if args.uniform \
            else list(itertools.product(HINTED, repeat=len(best_order) - 1))
        hinted = {p.id: p for p in (builder.build_shape(PlanShape(best_order, strategies=c))
                                    for c in combos)}
        plans = {**unhinted, **hinted}
        print(f"best order (warm-up pass, unhinted): {' ⋈ '.join(best_order)}; "
              f"{len(plans)} plans a round ({len(hinted)} hinted)", flush=True)
        times = np.empty((len(frames), len(plans)))
        ids = list(plans)
        for r, f in enumerate(frames):
            runs: dict[str, list[float]] = {pid: [] for pid in ids}
            for _ in range(args.repeats):
                shuffled = ids[:]
                rng.shuffle(shuffled)
                for pid in shuffled:
                    runs[pid].append(run_seconds(spark, plans[pid], f, query))
            times[r] = [statistics.median(runs[pid]) for pid in ids]
            print(f"  round {r} done", file=sys.stderr, flush=True)
    finally:
        spark.stop()
    report(times, ids, list(unhinted), list(hinted), builder.build_shape(
        PlanShape(best_order)).id)
    return 0


def headroom(times: np.ndarray, ids: list[str], space: list[str]) -> tuple[str, float, float]:
    """The best fixed plan of ``space``, its total seconds and the fastest-per-round total."""
    columns = [ids.index(p) for p in space]
    sub = times[:, columns]
    totals = sub.sum(axis=0)
    best = int(np.argmin(totals))
    return space[best], float(totals[best]), float(sub.min(axis=1).sum())


def report(times: np.ndarray, ids: list[str], unhinted: list[str], hinted: list[str],
           best_auto: str) -> None:
    auto = times[:, ids.index(best_auto)]
    columns = [ids.index(p) for p in hinted]
    fastest = times[:, columns].min(axis=1)
    which = [hinted[i] for i in times[:, columns].argmin(axis=1)]
    print()
    print(f"{'round':>5} {'unhinted ' + best_auto:>24} {'fastest hinted':>26} {'s':>6} "
          f"{'unhinted/hinted':>15}")
    for r in range(len(times)):
        print(f"{r:5d} {auto[r]:24.3f} {which[r]:>26} {fastest[r]:6.3f} "
              f"{auto[r] / fastest[r]:15.2f}")
    print()
    print(f"{'plan space':<34} {'best fixed plan':>26} {'fixed s':>8} {'fastest/round s':>15} "
          f"{'headroom':>8}")
    for label, space in (("without strategies (3 orders)", unhinted),
                         (f"with strategies (+{len(hinted)} hinted)", unhinted + hinted)):
        plan, fixed, oracle = headroom(times, ids, space)
        print(f"{label:<34} {plan:>26} {fixed:8.2f} {oracle:15.2f} {fixed / oracle:8.2f}")
    gain = auto / fastest
    print(f"\nfastest hinted plan over Spark's unhinted choice in the same order: median "
          f"x{np.median(gain):.2f}; >= 10% faster in {np.mean(gain >= 1.1):.0%} of "
          f"{len(gain)} rounds")
    per_plan = {p: float(times[:, ids.index(p)].sum()) for p in ids}
    print("totals per plan (s): " + ", ".join(f"{p} {s:.2f}" for p, s in
                                             sorted(per_plan.items(), key=lambda kv: kv[1])))
    print("headroom: the best fixed plan's total over the fastest plan's per round, summed "
          "(1.00: no plan beats one fixed plan); each time a median of the repeats")


if __name__ == "__main__":
    sys.exit(main())
