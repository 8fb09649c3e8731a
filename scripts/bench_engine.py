"""Benchmark: does the chart's choice pay off on Spark? ``cqopt run --shadow``, measured.

Two join queries, each on generated traces whose rates swing so that the
model's best join order changes (the streams take turns being the slow one):

- Q2 of ``examples/workload.toml`` (TCP ⋈ UDP ⋈ SF on host ids, 3 candidate
  plans), phases: SF slow, then TCP slow, then UDP slow;
- Q4, a 4-way chain join TCP ⋈ UDP ⋈ SF ⋈ ICMP (4 candidate plans), phases:
  ICMP slow, TCP slow, SF slow.

The catalog is ``examples/dec-pkt.toml`` with each stream's rate range
widened to the benchmark's rates (``--small``/2 .. 1.25 ``--big``) and, for Q4,
a fourth stream ICMP with the same columns. Join keys are uniform over 1..1000
(``cqopt generate --steady``), so every join selectivity is about 0.001, the
value the workload's λ-λ charts fix. Each query runs on Spark's streaming
runner (:class:`cqopt.spark.run.AdaptiveRun`, trigger available-now, one
file per round per stream, ``shadow=True``: every candidate plan is timed on
every round with Spark's noop sink) twice: with the chart built from the
paper's operator rates, and with the chart built from rates that
:func:`cqopt.spark.calibrate.calibrate` measures first on the same session.

Printed per configuration: measured fidelity (the chosen plan measured
fastest within 10% or 50 ms), measured regret (mean time over the round's
fastest), the model's fidelity for the same rounds, and the total noop time of
(a) the adaptive chart's plans, (b) the best static plan in hindsight, (c) the
worst static plan, with the fastest-per-round oracle beside them. Also
printed: Spark's per-job overhead (a trivial job, median of 7) and the median
per-round spread between the slowest and fastest plan, so that one can see
whether plan differences stand above that overhead.

    python scripts/bench_engine.py [--big 16000] [--small 800] [--rounds-per-phase 3]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd

from cqopt.catalog import Catalog, load_catalog
from cqopt.charts.spec import workload_specs
from cqopt.charts.workload import load_workload
from cqopt.replay.replay import local_chart
from cqopt.replay.trace_generate import generate_trace
from cqopt.replay.trace_write import write_trace_per_round

ROOT = Path(__file__).resolve().parent.parent
Q4 = """\
[defaults]
k = 6
weights = [0.4, 0.6]
model = "om"
memory_unit = "bytes"

[[query]]
name = "Q4"
sql = \"\"\"
SELECT *
FROM TCP, UDP, SF, ICMP
WHERE TCP.src_host = UDP.dest_host AND UDP.src_host = SF.dest_host
  AND SF.src_host = ICMP.dest_host
WINDOW [1]
\"\"\"
fixed = { "jsel.TCP.UDP" = 0.001, "jsel.SF.UDP" = 0.001, "jsel.ICMP.SF" = 0.001 }
"""
PHASES = {"Q2": ["SF", "TCP", "UDP"], "Q4": ["ICMP", "TCP", "SF"]}  # the slow stream


def bench_catalog(big: float, small: float) -> Catalog:
    data = load_catalog(ROOT / "examples" / "dec-pkt.toml").to_dict()
    for stream in data["streams"].values():
        stream["rate"] = [small / 2, big * 1.25]
    data["streams"]["ICMP"] = dict(data["streams"]["SF"])
    return Catalog.from_dict(data)


def traces(catalog: Catalog, streams: list[str], slow: list[str], per_phase: int, big: float,
           small: float, folder: Path, seed: int, keys: int = 1000) -> Path:
    """One file per 1 s round per stream; phase p has stream slow[p] at ``small``;
    join keys uniform over ``1..keys``."""
    rounds = per_phase * len(slow) + 1  # the last round stays pending (incomplete)
    for i, name in enumerate(streams):
        stream = catalog.stream(name)
        parts = []
        for p, slow_one in enumerate(slow):
            rate = small if name == slow_one else big
            length = per_phase + (1 if p == len(slow) - 1 else 0)
            part = generate_trace(stream, length, seed=seed + 100 * i + p, mean_rate=rate,
                                  rate_cv=0.05, steady={"src_host": keys, "dest_host": keys})
            part["ts"] += p * per_phase
            parts.append(part)
        frame = pd.concat(parts, ignore_index=True).sort_values("ts", ignore_index=True)
        write_trace_per_round(frame, folder / name, 1.0, start=0.0, rounds=rounds)
    return folder


def job_overhead(spark) -> float:
    times = []
    for _ in range(7):
        began = time.perf_counter()
        spark.range(1).count()
        times.append(time.perf_counter() - began)
    return statistics.median(times)


def run_one(spark, name, query, chart, catalog, folder: Path, out: Path) -> dict:
    from cqopt.spark.run import AdaptiveRun, RunSettings, Source

    sources = {s: Source.files(s, folder / s) for s in query.stream_names}
    run = AdaptiveRun(spark, name, query, chart, catalog, sources, out,
                      RunSettings(window_s=1.0, shadow=True, start=0.0),
                      progress=lambda line: print(f"    {line}", file=sys.stderr, flush=True))
    result = run.run()
    s = result.summary
    times = result.rounds[[c for c in result.rounds.columns if c.startswith("shadow:")]]
    spread = float(np.median(times.max(axis=1) - times.min(axis=1)))
    return {"summary": s, "spread": spread,
            "chart_plans": len(np.unique(chart.plan_index)), "plans": len(chart.plans)}


def main() -> int:
    args = _arguments()
    from cqopt.spark.session import spark_session

    catalog = bench_catalog(args.big, args.small)
    work = Path(tempfile.mkdtemp(prefix="cqopt-bench-engine-"))
    (work / "q4.toml").write_text(Q4, encoding="utf-8")
    specs = dict((s.name, (s, q)) for s, q in
                 workload_specs(load_workload(ROOT / "examples" / "workload.toml"), catalog)
                 + workload_specs(load_workload(work / "q4.toml"), catalog))
    names = [n for n in args.queries.split(",") if n]
    spark = spark_session(args.master, progress=False,
                          conf={"spark.sql.shuffle.partitions": "2",
                                "spark.driver.memory": args.driver_memory})
    rows = []
    try:
        overhead = job_overhead(spark)
        print(f"Spark {spark.version}, master {args.master}; per-job overhead (trivial job, "
              f"median of 7): {overhead * 1000:.0f} ms")
        print(f"rounds of W = 1 s; fast streams {args.big:g} tuples/s, the slow one "
              f"{args.small:g}/s; join keys uniform over 1..1000 (jsel ~ 0.001); "
              f"{args.rounds_per_phase} rounds per phase")
        configs = _configurations(spark, catalog, args.calibrate_rows)
        for name in names:
            spec, query = specs[name]
            folder = traces(catalog, list(query.stream_names), PHASES[name],
                            args.rounds_per_phase, args.big, args.small,
                            work / "traces" / name, args.seed)
            for label, cat in configs.items():
                print(f"  running {name} with {label}", file=sys.stderr, flush=True)
                chart = local_chart(spec, cat)
                began = time.perf_counter()
                result = run_one(spark, name, query, chart, cat, folder,
                                 work / "runs" / f"{name}-{label.split()[0]}")
                rows.append((name, label, result, time.perf_counter() - began))
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    _print_rows(rows)
    return 0


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--big", type=float, default=16000, help="tuples/s of a fast stream")
    parser.add_argument("--small", type=float, default=800, help="tuples/s of the slow one")
    parser.add_argument("--rounds-per-phase", type=int, default=3)
    parser.add_argument("--calibrate-rows", type=int, default=8_000_000,
                        help="rows of calibration's largest size: at a few hundred thousand, "
                             "Spark's per-job cost hides a selection's own (8,000,000)")
    parser.add_argument("--driver-memory", default="6g",
                        help="the driver's memory: calibration caches its data twice (6g)")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--queries", default="Q2,Q4")
    parser.add_argument("--seed", type=int, default=7)
    return parser.parse_args()


def _configurations(spark, catalog: Catalog, calibrate_rows: int) -> dict[str, Catalog]:
    """The paper's operator rates, and (where calibration succeeds) this engine's."""
    configs = {"paper rates": catalog}
    try:
        from cqopt.spark.calibrate import calibrate

        began = time.perf_counter()
        measured = calibrate(spark, catalog, max_rows=calibrate_rows, sizes=3, repeats=1)
        configs["calibrated rates"] = replace(catalog, operators=measured.rates)
        print(f"calibrated in {time.perf_counter() - began:.0f} s: " + ", ".join(
            f"{k} {v.rate:,.0f}/s (fixed {v.fixed:.3f} s)" for k, v in measured.fits.items()))
    except Exception as err:  # report it; the paper's rates still run
        print(f"calibration failed, calibrated configuration skipped: {err}")
    return configs


def _print_rows(rows: list) -> None:
    print()
    print(f"{'query':<5} {'config':<17} {'rounds':>6} {'meas.fid':>8} {'meas.regret':>11} "
          f"{'model fid':>9} {'adaptive s':>10} {'best static s':>20} {'worst static s':>20} "
          f"{'oracle s':>8} {'spread s':>8} {'switches':>8}")
    for name, label, result, wall in rows:
        s, m = result["summary"], result["summary"]["measured"]
        t = m["total_seconds"]
        print(f"{name:<5} {label:<17} {s['rounds']:6d} {m['fidelity']:8.3f} "
              f"{m['regret']:11.3f} {m['model_fidelity_same_rounds']:9.3f} "
              f"{t['adaptive']:10.2f} {t['best_static']:7.2f} {t['best_static_plan']:>12} "
              f"{t['worst_static']:7.2f} {t['worst_static_plan']:>12} {t['oracle']:8.2f} "
              f"{result['spread']:8.3f} {s['switches']:8d}")
    for name, label, result, wall in rows:
        s = result["summary"]
        print(f"{name} / {label}: plans run {s['plans_run']}; the chart uses "
              f"{result['chart_plans']} of {result['plans']} plans; fastest per round "
              f"{s['measured']['fastest']}; model optimum {s['model']['optimal']}; "
              f"run took {wall:.0f} s")


if __name__ == "__main__":
    sys.exit(main())
