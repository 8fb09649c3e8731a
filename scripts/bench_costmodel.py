"""Benchmark: cell·plan evaluations per second of the vectorized cost kernels.

For the OM paper's Q1 (sel-λ grid) and Q2 (λ-λ-λ grid), both models score
every candidate plan over about 10^6 cells in one call, in two layouts: as
axes that broadcast into the grid, and as flat per-cell arrays, which is what
a chart build feeds the kernel (cells in batches). The median of several runs
is reported, with the ratio to a plain Python loop that calls the same model
cell by cell (timed on a sample of cells, in the same process).

    python scripts/bench_costmodel.py [--cells 1000000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import numpy as np

from cqopt.catalog import load_catalog
from cqopt.costmodel import OM, PIPES, Utility, plan_utilities
from cqopt.optimizer.enumerate import enumerate_plans
from cqopt.optimizer.logical import parse_query

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", type=int, default=1_000_000, help="grid cells per query")
    parser.add_argument("--repeat", type=int, default=5, help="timed runs per case")
    parser.add_argument("--loop-sample", type=int, default=2000,
                        help="cells timed in the plain Python loop baseline")
    args = parser.parse_args()
    catalog = load_catalog(EXAMPLES / "dec-pkt.toml")
    utility = Utility()
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


if __name__ == "__main__":
    main()
