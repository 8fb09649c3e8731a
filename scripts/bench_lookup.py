"""Benchmark: run-time plan lookup from a loaded chart set.

Prints, for a 2-D chart (the OM paper's Q1), a 3-D chart (its Q2) and a 4-D
chart (a 4-stream chain join), each as a k-regular grid and as a refined chart
(``--refine`` regions, looked up through its finest-level index; rows ``*-R``):

- ``choose()`` latency: the median per call over batches of calls, and the
  p99 of single calls timed one by one (timer overhead subtracted);
- ``choose_many()`` lookups per second over 10^6 random statistics;
- ``AdaptiveQuery.step`` (estimate, look up, observe) on Q1 and Q2, and its
  ratio to ``choose()``;
- the ratio to re-optimizing from scratch per call: enumerating and costing
  every candidate plan at the statistics, then taking the argmin (for the
  4-stream join), in the same process.

    python scripts/bench_lookup.py [--k 10] [--calls 200000] [--refine 1000]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

import cqopt.charts as charts
from cqopt.catalog import Catalog, load_catalog
from cqopt.charts.build import build_local
from cqopt.charts.spec import workload_specs
from cqopt.charts.store import write_chart_set
from cqopt.charts.workload import workload_from_dict
from cqopt.costmodel import plan_utilities
from cqopt.optimizer.query.logical import parse_query
from cqopt.optimizer.rules.enumerate import enumerate_plans

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
CHAIN4 = ("SELECT * FROM TCP, UDP, SF, WEB WHERE TCP.src_host = UDP.dest_host "
          "AND UDP.src_host = SF.dest_host AND SF.src_host = WEB.dest_host WINDOW [1]")


def catalog_with_web() -> Catalog:
    data = load_catalog(EXAMPLES / "dec-pkt.toml").to_dict()
    data["streams"]["WEB"] = {**data["streams"]["SF"], "rate": [20, 300]}
    return Catalog.from_dict(data)


def random_stats(chart, n: int, rng) -> list[dict[str, float]]:
    cols = {a.statistic: rng.uniform(a.lo, a.hi, n) for a in chart.spec.axes}
    return [{k: float(v[i]) for k, v in cols.items()} for i in range(n)]


def time_choose(cs, name: str, points: list[dict[str, float]], batch: int = 1000):
    choose = cs.choose
    per_batch = []
    for lo in range(0, len(points), batch):
        chunk = points[lo:lo + batch]
        start = time.perf_counter()
        for p in chunk:
            choose(name, p)
        per_batch.append((time.perf_counter() - start) / len(chunk))
    clock = time.perf_counter_ns
    empty = []
    for _ in range(20000):
        a = clock()
        empty.append(clock() - a)
    overhead = statistics.median(empty)
    single = []
    for p in points[:50000]:
        a = clock()
        choose(name, p)
        single.append(clock() - a - overhead)
    return statistics.median(per_batch) * 1e6, float(np.percentile(single, 99)) / 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--k", type=int, default=10, help="regions per axis")
    parser.add_argument("--calls", type=int, default=200_000, help="choose() calls per chart")
    parser.add_argument("--many", type=int, default=1_000_000, help="rows for choose_many")
    parser.add_argument("--refine", type=int, default=1000,
                        help="regions of each refined chart (cqopt build --refine)")
    args = parser.parse_args()
    catalog = catalog_with_web()
    cs = chart_set(catalog, args.k, args.refine)
    rng = np.random.default_rng(0)
    medians = time_lookups(cs, args.calls, args.many, rng)
    time_adaptive_steps(cs, rng)
    time_reoptimizing(cs, catalog, medians, rng)


def chart_set(catalog: Catalog, k: int, refine: int):
    """One chart set of Q1, Q2 and J4: their grids of ``k`` and their refined twins."""
    workload = workload_from_dict({"defaults": {"k": k}, "query": [
        {"name": "Q1", "sql": "SELECT TCP.src_host, TCP.dest_host FROM TCP "
                              "WHERE TCP.dest_host = 2 WINDOW [1]"},
        {"name": "Q2", "sql": "SELECT * FROM TCP, UDP, SF WHERE TCP.src_host = UDP.dest_host "
                              "AND UDP.dest_host = SF.dest_host WINDOW [1]",
         "fixed": {"jsel.TCP.UDP": 0.001, "jsel.SF.UDP": 0.001, "jsel.SF.TCP": 0.001}},
        {"name": "J4", "sql": CHAIN4},
    ]})
    specs = [s for s, _ in workload_specs(workload, catalog)]
    out = Path(tempfile.mkdtemp()) / "charts"
    refined = build_local(specs, catalog, progress=False, refine=refine)
    for chart in refined:  # one chart set: the grids and their refined twins
        chart.spec = replace(chart.spec, name=f"{chart.spec.name}-R")
    write_chart_set(out, build_local(specs, catalog, progress=False) + refined, catalog)
    return charts.load(out)


def time_lookups(cs, calls: int, many: int, rng) -> dict[str, float]:
    """choose() and choose_many() on every chart; each chart's median choose() in µs."""
    print(f"{'chart':6} {'axes':>4} {'cells':>7} {'choose median µs':>17} {'p99 µs':>7} "
          f"{'choose_many /s':>15}")
    medians = {}
    for name in ("Q1", "Q2", "J4", "Q1-R", "Q2-R", "J4-R"):
        chart = cs[name]
        points = random_stats(chart, calls, rng)
        time_choose(cs, name, points[:20000])  # warm-up
        median, p99 = time_choose(cs, name, points)
        medians[name] = median
        rows = {a.statistic: rng.uniform(a.lo, a.hi, many) for a in chart.spec.axes}
        runs = []
        for _ in range(5):
            start = time.perf_counter()
            cs.choose_many(name, rows)
            runs.append(time.perf_counter() - start)
        print(f"{name:6} {len(chart.spec.axes):4d} {chart.cells_stored:7d} {median:17.2f} "
              f"{p99:7.2f} {many / statistics.median(runs):15.3e}")
    return medians


def time_adaptive_steps(cs, rng) -> None:
    """One round of Algorithm 2 against one lookup, on the same chart and process."""
    from cqopt.runtime.adaptive import AdaptiveQuery

    for name in ("Q1", "Q2"):
        chart = cs[name]
        rounds = [{**p, **chart.spec.fixed} for p in random_stats(chart, 20000, rng)]
        axes = [{a.statistic: r[a.statistic] for a in chart.spec.axes} for r in rounds]
        query = AdaptiveQuery(chart)
        for r in rounds[:2000]:  # warm-up
            query.step(r)
        # Batches of steps and of choose() calls alternate, so a slower spell of the
        # machine falls on both; the ratio is the median of the pairs' ratios.
        steps, chooses, ratios = [], [], []
        for _ in range(3):
            for lo in range(0, len(rounds), 1000):
                start = time.perf_counter()
                for r in rounds[lo:lo + 1000]:
                    query.step(r)
                middle = time.perf_counter()
                for p in axes[lo:lo + 1000]:
                    chart.choose(p)
                end = time.perf_counter()
                steps.append((middle - start) / 1000)
                chooses.append((end - middle) / 1000)
                ratios.append((middle - start) / (end - middle))
        step, choose = statistics.median(steps) * 1e6, statistics.median(chooses) * 1e6
        print(f"AdaptiveQuery.step on {name} ({len(rounds[0])} statistics a round, decay "
              f"mean): median {step:.2f} µs against choose() {choose:.2f} µs in alternating "
              f"batches: {statistics.median(ratios):.2f}x (target at most 3.5x on Q2)")


def time_reoptimizing(cs, catalog: Catalog, medians: dict[str, float], rng) -> None:
    """Re-optimizing from scratch per call: enumerate and cost every plan, take the argmin."""
    spec = cs["J4"].spec
    model, utility = spec.cost_model(catalog), spec.utility
    query = parse_query(spec.sql, catalog)
    points = random_stats(cs["J4"], 300, rng)
    times = []
    for p in points:
        start = time.perf_counter()
        plans = enumerate_plans(query)
        scores = plan_utilities(model, utility, plans, {**spec.fixed, **p})
        plans[int(np.argmin(scores))]
        times.append(time.perf_counter() - start)
    reopt = statistics.median(times) * 1e6
    print(f"\nre-optimizing J4 per call ({len(enumerate_plans(query))} plans): median "
          f"{reopt:.0f} µs; chart lookup {medians['J4']:.2f} µs; ratio {reopt / medians['J4']:.0f}x")
    print("refined against grid choose() median: " + ", ".join(
        f"{n} {medians[n + '-R']:.2f} µs vs {medians[n]:.2f} µs" for n in ("Q1", "Q2", "J4"))
        + f"; worst refined {max(medians[n + '-R'] for n in ('Q1', 'Q2', 'J4')):.2f} µs "
        "(budget 1.5 µs)")

if __name__ == "__main__":
    main()
