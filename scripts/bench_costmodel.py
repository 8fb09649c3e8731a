"""Benchmark: cell·plan evaluations per second of the vectorized cost kernels.

For the OM paper's Q1 (sel-λ grid) and Q2 (λ-λ-λ grid), both models score
every candidate plan over about 10^6 cells in one call, in two layouts: as
axes that broadcast into the grid, and as flat per-cell arrays, which is what
a chart build feeds the kernel (cells in batches). The median of several runs
is reported, with the ratio to a plain Python loop that calls the same model
cell by cell (timed on a sample of cells, in the same process).

Then one plan at one point (the middle of the grid), medians over
``--point-repeat`` runs, in µs per plan: the baseline is the vectorised path
fed 0-d arrays (``model.cost`` and ``utility`` per plan, numpy's per-call
overhead on every operation); the fast path is ``model.cost`` at a point of
floats (the generated scalar code) and :func:`plan_utilities` at that point
(every plan's costs, then one vectorised utility), each with its ratio to
the baseline. Both give the same floats (tests/test_point_cost.py).

    python scripts/bench_costmodel.py [--cells 1000000] [--repeat 5] [--point-repeat 2000]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import numpy as np

from cqopt.catalog import load_catalog
from cqopt.costmodel import OM, PIPES, Utility, plan_utilities
from cqopt.optimizer.query.logical import parse_query
from cqopt.optimizer.rules.enumerate import enumerate_plans

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
Q1 = "SELECT TCP.src_host, TCP.dest_host FROM TCP WHERE TCP.dest_host = 2 WINDOW [1]"
Q2 = ("SELECT * FROM TCP, UDP, SF WHERE TCP.src_host = UDP.dest_host "
      "AND UDP.dest_host = SF.dest_host WINDOW [1]")


def grids(cells: int) -> dict[str, dict[str, np.ndarray]]:
    side2 = int(round(cells ** 0.5))
    side3 = int(round(cells ** (1 / 3)))
    sel = np.linspace(0.0005, 1.0, side2)[:, None]
    rate = np.linspace(100, 1000, side2)[None, :]
    r = np.linspace(100, 500, side3)
    return {
        "Q1": {"sel.TCP": sel, "rate.TCP": rate},
        "Q2": {"rate.TCP": r[:, None, None], "rate.UDP": r[None, :, None],
               "rate.SF": r[None, None, :], "jsel.TCP.UDP": 0.01, "jsel.SF.UDP": 0.01,
               "jsel.SF.TCP": 0.01},
    }


def per_plan_us(run, n_plans: int, repeat: int) -> float:
    """Median µs per plan of ``run()``, which costs ``n_plans`` plans."""
    run()
    run()  # the second call per plan generates its code; time what follows
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times) / n_plans * 1e6


def at_a_point(catalog, utility: Utility, repeat: int) -> None:
    print(f"\none plan at one point, µs per plan (median of {repeat} runs)")
    header = (f"{'query':5} {'model':6} {'plans':>5} {'0-d baseline':>12} {'cost()':>8} "
              f"{'ratio':>6} {'plan_utilities':>14} {'ratio':>6}")
    print(header)
    print("-" * len(header))
    for name, sql in (("Q1", Q1), ("Q2", Q2)):
        plans = enumerate_plans(parse_query(sql, catalog))
        stats = grids(16)[name]
        point = {k: float(np.ravel(v)[len(np.ravel(v)) // 2]) for k, v in stats.items()}
        zero_d = {k: np.asarray(v) for k, v in point.items()}
        for model in (OM(catalog), PIPES(catalog)):
            baseline = per_plan_us(lambda: [utility(model.cost(p, zero_d)) for p in plans],
                                   len(plans), repeat)
            cost = per_plan_us(lambda: [model.cost(p, point) for p in plans], len(plans),
                               repeat)
            scores = per_plan_us(lambda: plan_utilities(model, utility, plans, point),
                                 len(plans), repeat)
            print(f"{name:5} {model.name:6} {len(plans):5d} {baseline:12.1f} {cost:8.2f} "
                  f"{baseline / cost:5.0f}x {scores:14.2f} {baseline / scores:5.0f}x",
                  flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", type=int, default=1_000_000, help="grid cells per query")
    parser.add_argument("--repeat", type=int, default=5, help="timed runs per case")
    parser.add_argument("--loop-sample", type=int, default=2000,
                        help="cells timed in the plain Python loop baseline")
    parser.add_argument("--point-repeat", type=int, default=2000,
                        help="timed runs of the one-point costing")
    parser.add_argument("--point-only", action="store_true",
                        help="only the one-point costing")
    args = parser.parse_args()
    catalog = load_catalog(EXAMPLES / "dec-pkt.toml")
    utility = Utility()
    if args.point_only:
        at_a_point(catalog, utility, args.point_repeat)
        return
    print(f"{'query':5} {'model':6} {'layout':6} {'plans':>5} {'cells':>9} {'median s':>9} "
          f"{'cell·plan/s':>13} {'loop cell·plan/s':>17} {'speed-up':>9}")
    for name, sql in (("Q1", Q1), ("Q2", Q2)):
        plans = enumerate_plans(parse_query(sql, catalog))
        stats = grids(args.cells)[name]
        shape = np.broadcast_shapes(*(np.shape(v) for v in stats.values()))
        n_cells = int(np.prod(shape))
        full = {k: np.ascontiguousarray(np.broadcast_to(v, shape).ravel())
                for k, v in stats.items()}
        for model in (OM(catalog), PIPES(catalog)):
            medians = {}
            for layout, layout_stats in (("grid", stats), ("flat", full)):
                plan_utilities(model, utility, plans, layout_stats)  # warm-up
                times = []
                for _ in range(args.repeat):
                    start = time.perf_counter()
                    plan_utilities(model, utility, plans, layout_stats)
                    times.append(time.perf_counter() - start)
                medians[layout] = statistics.median(times)
            sample = min(args.loop_sample, n_cells)
            start = time.perf_counter()
            for i in range(sample):
                cell = {k: float(v[i]) for k, v in full.items()}
                for plan in plans:
                    utility(model.cost(plan, cell))
            loop = sample * len(plans) / (time.perf_counter() - start)
            for layout, median in medians.items():
                vectorized = n_cells * len(plans) / median
                print(f"{name:5} {model.name:6} {layout:6} {len(plans):5d} {n_cells:9d} "
                      f"{median:9.4f} {vectorized:13.3e} {loop:17.3e} "
                      f"{vectorized / loop:8.0f}x")
    at_a_point(catalog, utility, args.point_repeat)


if __name__ == "__main__":
    main()
