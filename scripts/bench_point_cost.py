"""Benchmark: every plan's utility at one point, µs per plan, old path against new.

What a round whose statistics leave its chart costs (the off-chart choice
costs every candidate at the measured point), and what the fallback's and
``explain``'s scoring cost. For the OM paper's Q1 (2 plans), Q2 (3 plans)
and a 4-stream chain join (J4), under the OM, PIPES and engine models:

- **old**: each plan's generated code (rate, memory, CPU and every
  operator's costs), then its utility in Python floats, plan by plan: what
  ``plan_utilities`` did at a point before;
- **new**: one generated function for the whole plan set, utility included
  (:class:`cqopt.costmodel.point.PointUtilities`), as the off-chart choice
  holds it;
- **plan_utilities**: the public kernel at a point, which finds the set's
  generated code in a per-model cache.

Each timed run costs every plan once at a point that moves from run to
run; the three paths are timed in interleaved order, the same points for
each, and the ratio is old over new, in the same process. Medians over
``--repeat`` runs. The budget is 5 µs a plan.

    python scripts/bench_point_cost.py [--repeat 3000]
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from pathlib import Path

import numpy as np

from cqopt.catalog import Catalog, load_catalog
from cqopt.costmodel import Engine, OM, PIPES, Utility, plan_utilities
from cqopt.costmodel.point import PointUtilities, _one_by_one
from cqopt.optimizer.query.logical import parse_query
from cqopt.optimizer.rules.enumerate import enumerate_plans

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
QUERIES = {
    "Q1": "SELECT TCP.src_host, TCP.dest_host FROM TCP WHERE TCP.dest_host = 2 WINDOW [1]",
    "Q2": ("SELECT * FROM TCP, UDP, SF WHERE TCP.src_host = UDP.dest_host "
           "AND UDP.dest_host = SF.dest_host WINDOW [1]"),
    "J4": ("SELECT * FROM TCP, UDP, SF, WEB WHERE TCP.src_host = UDP.dest_host "
           "AND UDP.src_host = SF.dest_host AND SF.src_host = WEB.dest_host WINDOW [1]"),
}
BUDGET_US = 5.0


def catalog_with_web() -> Catalog:
    data = load_catalog(EXAMPLES / "dec-pkt.toml").to_dict()
    data["streams"]["WEB"] = {**data["streams"]["SF"], "rate": [20, 300]}
    return Catalog.from_dict(data)


def points(names: tuple[str, ...], n: int, rng: np.random.Generator) -> list[dict[str, float]]:
    """``n`` points of plain floats: rates in [50, 5000], selectivities in [1e-4, 1]."""
    return [{name: float(rng.uniform(50, 5000) if name.startswith("rate.") else
                         10 ** rng.uniform(-4, 0)) for name in names} for _ in range(n)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3000, help="timed runs per path")
    args = parser.parse_args()
    catalog, utility = catalog_with_web(), Utility()
    rng = np.random.default_rng(0)
    print(f"µs per plan, median of {args.repeat} runs (budget {BUDGET_US:g} µs a plan)")
    header = (f"{'query':5} {'model':6} {'plans':>5} {'old':>7} {'new':>7} {'ratio':>6} "
              f"{'plan_utilities':>14} {'ratio':>6}")
    print(header)
    print("-" * len(header))
    worst = 0.0
    for name, sql in QUERIES.items():
        query = parse_query(sql, catalog)
        plans = enumerate_plans(query, catalog=catalog)
        at = points(tuple(query.statistics), args.repeat, rng)
        for model in (OM(catalog), PIPES(catalog), Engine(catalog)):
            new = PointUtilities(model, utility, plans)
            paths = {"old": lambda p: _one_by_one(model, utility, plans, p), "new": new,
                     "kernel": lambda p: plan_utilities(model, utility, plans, p)}
            for path in paths.values():  # generate every path's code before timing
                for p in at[:3]:
                    path(p)
            assert all(np.array_equal(paths["old"](p), path(p), equal_nan=True)
                       for path in paths.values() for p in at[:50])
            times = {key: [] for key in paths}
            order = list(paths)
            for p in at:
                random.shuffle(order)
                for key in order:
                    path = paths[key]
                    start = time.perf_counter()
                    path(p)
                    times[key].append(time.perf_counter() - start)
            us = {key: statistics.median(t) / len(plans) * 1e6 for key, t in times.items()}
            worst = max(worst, us["new"])
            print(f"{name:5} {model.name:6} {len(plans):5d} {us['old']:7.2f} {us['new']:7.2f} "
                  f"{us['old'] / us['new']:5.1f}x {us['kernel']:14.2f} "
                  f"{us['old'] / us['kernel']:5.1f}x", flush=True)
    print(f"worst new path: {worst:.2f} µs a plan "
          f"({'within' if worst <= BUDGET_US else 'over'} the {BUDGET_US:g} µs budget)")


if __name__ == "__main__":
    main()
