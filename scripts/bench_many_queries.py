"""Benchmark: one round's plans for 10^4 queries, one call, against a choose() per query.

The workload is the example workload's two queries (examples/workload.toml)
in variants with other constants and windows: ``--distinct`` charts are
built in this process (k = ``--k``), half variants of Q1 (a selection on TCP:
sel.TCP and rate.TCP axes), half of Q2 (the 3-stream join: rate axes), and
``--queries`` names are dealt out over them round robin (a chart under
several names; building 10^4 charts takes minutes: ``--distinct 10000``
builds them all). Every round draws the three streams' rates and sel.TCP
once for the whole workload; every other round spills 30% beyond the charts'
ranges on both sides, so clamps are found and reported.

Per round, alternating so that a busier spell of the machine falls on both:

- scalar: ``QueryChart.choose`` per query (its statistics' dict made
  before the clock starts);
- vectorized: ``Decider.choose`` on the round's shared statistics, and the
  same with every query's plan and the clamp report read out
  (``Decisions.plans``, ``Decisions.clamped``).

Medians per query and the median of the rounds' ratios. Then the load
times of a one-stream and a 7-stream chart set (scripts/bench_load.py).

    python scripts/bench_many_queries.py [--queries 10000] [--distinct 200] [--k 4]
        [--rounds 30] [--load-repeat 200]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
from bench_load import plans_at_load

from cqopt.catalog import load_catalog
from cqopt.charts.build import build_local
from cqopt.charts.lookup import load
from cqopt.charts.many import Decider
from cqopt.charts.spec import workload_specs
from cqopt.charts.store import write_chart_set
from cqopt.charts.workload import load_workload, workload_from_dict

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def variants(n: int) -> list[dict]:
    """``n`` queries: the example workload's Q1 and Q2 with other constants and windows."""
    base = {q.name: q for q in load_workload(EXAMPLES / "workload.toml").queries}
    q1, q2 = base["Q1"], base["Q2"]
    out = []
    for i in range(n):
        if i % 2 == 0:
            sql = q1.sql.replace("TCP.dest_host = 2", f"TCP.dest_host = {i // 2}")
            out.append({"name": f"Q1v{i // 2}", "sql": sql})
        else:
            sql = q2.sql.replace("WINDOW [1]", f"AND TCP.src_host > {i // 2} WINDOW "
                                               f"[{1 + i // 2 % 5}]")
            out.append({"name": f"Q2v{i // 2}", "sql": sql, "fixed": q2.options["fixed"]})
    return out


def round_stats(decider: Decider, rng: np.random.Generator, spill: float) -> dict[str, float]:
    axes = [a for c in decider.charts.values() for a in c.spec.axes]
    out = {}
    for s in decider.statistics:
        lo = min(a.lo for a in axes if a.statistic == s)
        hi = max(a.hi for a in axes if a.statistic == s)
        x = rng.uniform(max(lo - spill * (hi - lo), 0.0), hi + spill * (hi - lo))
        out[s] = min(x, 1.0) if not s.startswith("rate") else x
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, default=10_000, help="queries decided a round")
    parser.add_argument("--distinct", type=int, default=200, help="charts built")
    parser.add_argument("--k", type=int, default=4, help="regions per axis")
    parser.add_argument("--rounds", type=int, default=30, help="timed rounds")
    parser.add_argument("--load-repeat", type=int, default=200,
                        help="alternating loads of the one-stream and 7-stream sets")
    args = parser.parse_args()
    catalog = load_catalog(EXAMPLES / "dec-pkt.toml")
    workload = workload_from_dict({"defaults": {"k": args.k, "weights": [0.4, 0.6]},
                                   "query": variants(args.distinct)})
    start = time.perf_counter()
    specs = [s for s, _ in workload_specs(workload, catalog)]
    with tempfile.TemporaryDirectory(prefix="cqopt-bench-many-") as tmp:
        write_chart_set(Path(tmp) / "charts", build_local(specs, catalog, progress=False),
                        catalog)
        charts = load(Path(tmp) / "charts")
        built = time.perf_counter() - start
        names = list(charts)
        workload_charts = {f"{names[i % len(names)]}#{i}": charts[names[i % len(names)]]
                           for i in range(args.queries)}
        start = time.perf_counter()
        decider = Decider(workload_charts)
        print(f"{len(names)} distinct charts (k = {args.k}) built, written and loaded in "
              f"{built:.1f} s; {args.queries} queries dealt out over them; {decider!r} built "
              f"in {time.perf_counter() - start:.2f} s", flush=True)
        rng = np.random.default_rng(0)
        axes = {q: [a.statistic for a in c.spec.axes] for q, c in workload_charts.items()}
        scalar, vector, full, ratios, clamped = [], [], [], [], []
        for r in range(args.rounds + 2):  # two warm-up rounds
            stats = round_stats(decider, rng, 0.3 if r % 2 else 0.0)
            own = [(c.choose, {s: stats[s] for s in axes[q]})
                   for q, c in workload_charts.items()]
            t0 = time.perf_counter()
            for choose, given in own:
                choose(given)
            t1 = time.perf_counter()
            decider.choose(stats)
            t2 = time.perf_counter()
            decisions = decider.choose(stats)
            decisions.plans, decisions.clamped  # noqa: B018 - read out, as a caller would
            t3 = time.perf_counter()
            if r >= 2:
                scalar.append((t1 - t0) / args.queries)
                vector.append((t2 - t1) / args.queries)
                full.append((t3 - t2) / args.queries)
                ratios.append((t1 - t0) / (t2 - t1))
                if r % 2:
                    clamped.append(len(decisions.clamped))
    s, v, f = (statistics.median(x) * 1e6 for x in (scalar, vector, full))
    print(f"\nper query, medians of {args.rounds} rounds (in the rounds that spill beyond the "
          f"charts, a median {statistics.median(clamped):.0f} of {args.queries} queries clamped):")
    print(f"  scalar choose()                          {s:7.3f} µs")
    print(f"  Decider.choose                           {v:7.3f} µs  (target: at most 1 µs)")
    print(f"  Decider.choose, plans and clamps read    {f:7.3f} µs")
    print(f"  scalar / vectorized: {statistics.median(ratios):.1f}x (median of the rounds' "
          "ratios)\n", flush=True)
    with tempfile.TemporaryDirectory(prefix="cqopt-bench-many-load-") as tmp:
        plans_at_load(Path(tmp), args.load_repeat)


if __name__ == "__main__":
    main()
