"""Storage curve: regret against cells stored, k-regular grids against adaptive refinement.

For the OM paper's Q1 (sel-λ, 2 axes) and Q2 (λ-λ, 3 axes) over the DEC-PKT
catalog, replays generated per-round statistics (:func:`cqopt.replay.replay`)
through

- the k-regular grid for k = 5, 10, 20, 40 (k^axes cells), and
- the refined chart (:mod:`cqopt.charts.refine`) at the same budgets and at
  a tenth and a twentieth of the k = 40 grid's cells,

and prints, per chart, the cells stored, the plans used, the regret of the
chart chosen from estimates (``regret``, what a running query pays) and of
the chart looked up at the true statistics (``oracle``: the chart's own
discretization loss, which is what cells can buy). The last lines compare the
k = 40 grid with the smallest refined chart that reaches its regret.

The statistics are generated here with numpy (no Spark): per stream, a
log-rate AR(1) around a drifting level with occasional bursts, clipped to the
catalog's range, and for Q1 a selectivity drifting on the logit scale. Each
trace is ``--rounds`` rounds, seeded.

    python scripts/chart_storage.py [--rounds 3000] [--seed 0]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import pandas as pd

from cqopt.catalog import Catalog, load_catalog
from cqopt.charts.kernel import ChartContext
from cqopt.charts.lookup import QueryChart
from cqopt.charts.refine import fine_spec, refine_chart
from cqopt.charts.spec import ChartSpec, workload_specs
from cqopt.charts.workload import load_workload
from cqopt.replay.replay import exact_utilities, local_chart, replay, with_k

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
KS = (5, 10, 20, 40)


def generated_rounds(spec: ChartSpec, catalog: Catalog, rounds: int,
                     rng: np.random.Generator) -> pd.DataFrame:
    """Per-round statistics for every axis of ``spec`` (see the module docstring)."""
    out: dict[str, np.ndarray] = {"round": np.arange(rounds),
                                  "start": np.arange(rounds, dtype=float)}
    for axis in spec.axes:
        kind = axis.statistic.split(".")[0]
        if kind == "rate":
            lo, hi = axis.lo, axis.hi
            level = np.cumsum(rng.normal(0, 0.02, rounds))  # a slow drift of the mean
            level = np.log(lo) + (np.log(hi) - np.log(lo)) * (0.5 + 0.35 * np.tanh(level))
            noise = np.zeros(rounds)
            for t in range(1, rounds):
                noise[t] = 0.8 * noise[t - 1] + rng.normal(0, 0.15)
            burst = (rng.random(rounds) < 0.02) * rng.exponential(0.8, rounds)
            out[axis.statistic] = np.clip(np.exp(level + noise + burst), lo, hi)
        else:
            logit = np.cumsum(rng.normal(0, 0.05, rounds)) + rng.normal(0, 0.3, rounds) - 1.0
            out[axis.statistic] = np.clip(1 / (1 + np.exp(-logit)), axis.lo, axis.hi)
    return pd.DataFrame(out)


def refined_query_chart(spec: ChartSpec, catalog: Catalog, budget: int) -> QueryChart:
    context = ChartContext(spec, catalog)
    chart = refine_chart(context, budget)
    leaves = chart.leaves
    return QueryChart(fine_spec(chart.spec, leaves), context.plans,
                      leaves.expand().astype(np.intp), None, leaves)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3000, help="rounds per generated trace")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    catalog = load_catalog(EXAMPLES / "dec-pkt.toml")
    specs = [s for s, _ in workload_specs(load_workload(EXAMPLES / "workload.toml"), catalog)]
    print(f"generated traces: {args.rounds} rounds, seed {args.seed}; regret = mean "
          "cost(chosen)/cost(optimal) - 1 per round")
    print(f"{'query':5} {'chart':20} {'cells':>7} {'plans':>5} {'regret':>9} {'oracle':>9} "
          f"{'build s':>7}")
    for spec in specs:
        observed = generated_rounds(spec, catalog, args.rounds, np.random.default_rng(args.seed))
        n_axes = len(spec.axes)
        rows = []
        utilities = None
        for k in KS:
            start = time.perf_counter()
            chart = local_chart(with_k(spec, k), catalog)
            built = time.perf_counter() - start
            utilities = exact_utilities(chart, catalog, observed) if utilities is None \
                else utilities
            rows.append(("grid", f"k={k}", chart, built))
        k40 = KS[-1] ** n_axes
        for budget in sorted({*(k ** n_axes for k in KS[:-1]), k40 // 20, k40 // 10, k40}):
            start = time.perf_counter()
            chart = refined_query_chart(spec, catalog, budget)
            rows.append(("refined", f"budget={budget}", chart, time.perf_counter() - start))
        results = []
        for kind, label, chart, built in rows:
            summary = replay(spec.name, chart, catalog, observed, utilities=utilities).summary
            regret = summary["regret"]
            oracle = summary["baselines"]["oracle_chart"]["regret"]
            cells = chart.cells_stored
            plans = len(np.unique(chart.plan_index))
            results.append((kind, label, cells, regret, oracle))
            print(f"{spec.name:5} {kind + ' ' + label:20} {cells:7d} {plans:5d} {regret:9.5f} "
                  f"{oracle:9.5f} {built:7.2f}")
        grid40 = next(r for r in results if r[0] == "grid" and r[1] == f"k={KS[-1]}")
        for column, name in ((3, "regret"), (4, "oracle regret")):
            reach = [r for r in results
                     if r[0] == "refined" and r[column] <= grid40[column] + 1e-12]
            if reach:
                best = min(reach, key=lambda r: r[2])
                print(f"{spec.name}: {name}: the k={KS[-1]} grid ({grid40[2]} cells) has "
                      f"{grid40[column]:.5f}; refinement reaches it with {best[2]} cells "
                      f"({best[2] / grid40[2]:.1%} of the grid's), {best[column]:.5f}")
            else:
                print(f"{spec.name}: {name}: no refined chart reaches the k={KS[-1]} grid's "
                      f"{grid40[column]:.5f}")


if __name__ == "__main__":
    main()
