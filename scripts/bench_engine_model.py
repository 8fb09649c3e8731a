"""Benchmark: the engine model's error on plan times measured on Spark ``local[2]``.

``cqopt run --shadow`` times every candidate plan of a query on every round
(on the same cached inputs, in rotating order). The engine model's constants
are fitted to the even rounds (:func:`cqopt.spark.engine_fit.fit_runs`, what
``cqopt calibrate --from-run`` does) and judged on the odd ones: the median
absolute relative error of predicted against measured seconds, per plan and
overall, beside a baseline that knows each plan's mean time on the even
rounds (no model). Also printed: how often the model's cheapest plan was the
measured fastest within 10% or 50 ms, on the odd rounds.

The streams: the README's catalog and Q2 (a three-way join), ``--rounds``
one-second rounds, rates varying by ``--rate-cv`` and scaled by
``--rate-scale`` so that rounds differ in size; join keys uniform over 100
hosts so that joins emit a few hundred rows a round.

    flock /tmp/cqopt-spark.lock python scripts/bench_engine_model.py [--rounds 30]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from cqopt.catalog import load_catalog
from cqopt.charts.build import build_local
from cqopt.charts.spec import workload_specs
from cqopt.charts.store import write_chart_set
from cqopt.charts.workload import load_workload
from cqopt.cli.main import main as cqopt_main
from cqopt.costmodel.engine import CONSTANTS

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
STREAMS = ("TCP", "UDP", "SF")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--rate-scale", type=float, default=3.0)
    parser.add_argument("--rate-cv", type=float, default=0.6)
    args = parser.parse_args()
    import cqopt.charts as charts
    from cqopt.spark.engine_fit import fit_runs
    from cqopt.spark.session import spark_session
    from cqopt.spark.run import AdaptiveRun, RunSettings, Source

    catalog = load_catalog(EXAMPLES / "dec-pkt.toml")
    specs = workload_specs(load_workload(EXAMPLES / "workload.toml"), catalog)
    q2_spec, query = dict((s.name, (s, q)) for s, q in specs)["Q2"]
    with tempfile.TemporaryDirectory(prefix="bench-engine-model-") as tmp:
        folder = Path(tmp)
        write_chart_set(folder / "charts", build_local([q2_spec], catalog, progress=False),
                        catalog)
        chart = charts.load(folder / "charts")["Q2"]
        traces = folder / "traces"
        assert cqopt_main(["generate", "--catalog", str(EXAMPLES / "dec-pkt.toml"), "--out",
                           str(traces), "--duration", str(args.rounds + 1),
                           "--file-per-round", "1", "--rate-cv", str(args.rate_cv),
                           "--streams", ",".join(STREAMS), "--steady", "TCP.src_host=100",
                           "--steady", "UDP.dest_host=100", "--steady", "SF.dest_host=100"]
                          + [a for s in STREAMS
                             for a in ("--rate-scale", f"{s}={args.rate_scale}")]) == 0
        spark = spark_session("local[2]", progress=False)
        spark.sparkContext.setLogLevel("ERROR")
        began = time.perf_counter()
        run = AdaptiveRun(spark, "Q2", query, chart, catalog,
                          {s: Source.files(s, traces / s) for s in STREAMS}, folder / "run",
                          RunSettings(window_s=1.0, shadow=True, max_files_per_trigger=1,
                                      max_rounds=args.rounds), progress=lambda _: None)
        result = run.run()
        print(f"cqopt run --shadow: {len(result.rounds)} rounds of Q2 x {len(chart.plans)} "
              f"plans in {time.perf_counter() - began:.1f} s (rate scale {args.rate_scale:g})")
        fit = fit_runs([folder / "run"], catalog)
        for line in fit.summary_lines():
            print(line)
        timings = fit.timings
        odd = [t for t in timings if t.round % 2]
        means = {p: statistics.mean(t.seconds for t in timings if t.plan == p and
                                    not t.round % 2) for p in {t.plan for t in timings}}
        naive = [abs(means[t.plan] - t.seconds) / t.seconds for t in odd]
        print(f"baseline (each plan's mean time on the even rounds): median absolute error "
              f"{statistics.median(naive):.1%} on the odd rounds")
        constants = np.array([getattr(fit.constants, n) for n in CONSTANTS])
        by_round: dict[int, dict[str, tuple[float, float]]] = {}
        for t in odd:
            by_round.setdefault(t.round, {})[t.plan] = (float(t.work @ constants), t.seconds)
        hits, differ = 0, 0
        for plans in by_round.values():
            measured = {p: m for p, (_, m) in plans.items()}
            fastest = min(measured.values())
            chosen = min(plans, key=lambda p: plans[p][0])
            if max(measured.values()) > fastest * 1.1 and max(measured.values()) - fastest > 0.05:
                differ += 1
                hits += (measured[chosen] <= fastest * 1.1
                         or measured[chosen] - fastest <= 0.05)
        print(f"the model's cheapest plan measured fastest (within 10% or 50 ms) in {hits} of "
              f"{differ} odd rounds whose plans differ by more than that")
        print("fitted constants: " + ", ".join(f"{n} {getattr(fit.constants, n):.3g}"
                                               for n in CONSTANTS))
        spark.stop()


if __name__ == "__main__":
    main()
