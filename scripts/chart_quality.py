"""How good are the charts against the best static plan? A table per choice mode.

For Q1, Q2 and a 4-way join over the DEC-PKT catalog (and the two EPA-HTTP
queries) on several traces, replay the per-round statistics through the chart
in each choice mode and print: the chart's regret, BEST-STATIC's regret (the
headroom), RATE's and ORACLE-CHART's, fidelity, switches per 600 rounds,
cells stored and plans used.

Traces: the README's generated traces (steady join keys), the same with
drifting join keys, DEC-PKT-1 UDP arrivals driving every stream's rate
(three 600-s slices, each stream its own slice and scale) and the EPA-HTTP
log. Per-round statistics need Spark; they are computed once per trace and
query and cached as Parquet under ``--cache``, so later runs replay without
Spark. Real traces are read from ../shared/data (skipped when absent).

    python scripts/chart_quality.py [--cache /tmp/cqopt-chart-quality] [--stats-only]

>>> sorted(MODES)[:2]
['expected', 'expected+fallback']
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

from cqopt.runtime.estimators import ESTIMATORS as PREDICTORS

# The predictors of OM's Algorithm 2, and the sampler that decides on the round's own
# statistics (replay/sampling.py) at two ratios.
ESTIMATORS = (*PREDICTORS, "sample:0.1", "sample:0.02")

REPO = Path(__file__).resolve().parents[1]
DATA = REPO.parent / "shared" / "data"
DEC_ARRIVALS = DATA / "dec-pkt-1-udp" / "dec-pkt-1-udp.arrivals.csv.gz"
EPA_LOG = DATA / "epa-http" / "epa-http.parsed.csv"

# A fourth stream for the 4-way join, shaped like the other three.
EXTRA_STREAM = """
[streams.ICMP]
rate = [50, 500]
granularity = 1e-6
columns = { ts = "timestamp", src_host = "int", dest_host = "int", src_port = "int", dest_port = "int", bytes = "int" }
"""
FOUR_WAY = '''
[[query]]
name = "Q4"
sql = """
SELECT *
FROM TCP, UDP, SF, ICMP
WHERE TCP.src_host = UDP.dest_host AND UDP.dest_host = SF.dest_host
  AND SF.dest_host = ICMP.dest_host
WINDOW [1]
"""
[query.fixed]
"jsel.TCP.UDP" = 0.001
"jsel.SF.UDP" = 0.001
"jsel.SF.TCP" = 0.001
"jsel.ICMP.SF" = 0.001
"jsel.ICMP.UDP" = 0.001
"jsel.ICMP.TCP" = 0.001
'''
STEADY = {"TCP": {"src_host": 1000}, "UDP": {"dest_host": 1000}, "SF": {"dest_host": 1000},
          "ICMP": {"dest_host": 1000}}
DURATION = 600.0
DEC_SLICES = (0.0, 1200.0, 2400.0)

# name -> AdaptiveQuery options (besides the estimator)
MODES = {
    "point": {},
    "point+hysteresis": {"hysteresis": "margin"},
    "point+priced": {"hysteresis": "priced"},
    "point+fallback": {"fallback": 60},
    "expected": {"choice": "expected"},
    "expected+fallback": {"choice": "expected", "fallback": 60},
    "expected+fallback+priced": {"choice": "expected", "fallback": 60, "hysteresis": "priced"},
}


def dec_inputs(cache: Path) -> tuple[Path, Path]:
    """The DEC catalog and workload with the fourth stream and the 4-way join."""
    cache.mkdir(parents=True, exist_ok=True)
    catalog = cache / "dec-pkt-4.toml"
    workload = cache / "workload-4.toml"
    catalog.write_text((REPO / "examples" / "dec-pkt.toml").read_text() + EXTRA_STREAM)
    workload.write_text((REPO / "examples" / "workload.toml").read_text() + FOUR_WAY)
    return catalog, workload


def generated_traces(cache: Path, catalog) -> dict[str, dict[str, Path]]:
    """Trace sets as files: name -> stream -> path (written once)."""
    from cqopt.replay.trace_generate import generate_trace, interarrival_slice, \
        load_interarrivals
    from cqopt.replay.trace_write import write_trace

    sets: dict[str, dict] = {"readme": {"steady": STEADY}, "drift-keys": {"steady": {}}}
    gaps = load_interarrivals(DEC_ARRIVALS) if DEC_ARRIVALS.exists() else None
    if gaps is None:
        print(f"skipping the DEC-PKT-1 traces: {DEC_ARRIVALS} is absent", file=sys.stderr)
    else:
        for start in DEC_SLICES:
            sets[f"dec-udp@{start:.0f}s"] = {"steady": STEADY, "start": start}
    out = {}
    names = list(catalog.streams)
    for name, how in sets.items():
        folder = cache / "traces" / name
        out[name] = {}
        for i, stream_name in enumerate(names):
            path = folder / f"{stream_name}.parquet"
            out[name][stream_name] = path
            if path.exists():
                continue
            stream = catalog.stream(stream_name)
            own = None
            if "start" in how:
                # Each stream its own 600-s slice, scaled to its catalog range's middle.
                scale = (sum(stream.rate) / 2) / (len(gaps) / gaps.sum())
                own = interarrival_slice(gaps, (how["start"] + i * DURATION) % gaps.sum(),
                                         DURATION, scale)
            frame = generate_trace(stream, DURATION, seed=i, interarrivals=own,
                                   steady=how["steady"].get(stream_name))
            write_trace(frame, path)
    return out


def round_stats_cached(cache: Path) -> dict[tuple[str, str], tuple]:
    """(trace set, query) -> (spec, statistics frame); Spark only for what is not cached."""
    from cqopt.catalog import load_catalog
    from cqopt.charts.spec import workload_specs
    from cqopt.charts.workload import load_workload
    from cqopt.replay.rounds import read_round_statistics, write_round_statistics

    catalog_path, workload_path = dec_inputs(cache)
    catalog = load_catalog(catalog_path)
    specs = workload_specs(load_workload(workload_path), catalog, {})
    traces = generated_traces(cache, catalog)
    jobs = [(t, spec, query, paths, catalog) for t, paths in traces.items()
            for spec, query in specs]
    if EPA_LOG.exists():
        epa_catalog = load_catalog(REPO / "examples" / "epa-http.toml")
        epa_specs = workload_specs(load_workload(REPO / "examples" / "epa-workload.toml"),
                                   epa_catalog, {})
        paths = {s: EPA_LOG for s in epa_catalog.streams}
        jobs += [("epa-http", spec, query, paths, epa_catalog) for spec, query in epa_specs]
    else:
        print(f"skipping the EPA-HTTP trace: {EPA_LOG} is absent", file=sys.stderr)
    out, todo = {}, []
    for trace, spec, query, paths, cat in jobs:
        file = cache / "rounds" / trace / f"{spec.name}.parquet"
        if file.exists():
            out[trace, spec.name] = (spec, read_round_statistics(file), cat)
        else:
            todo.append((trace, spec, query, paths, cat, file))
    if todo:
        from cqopt.spark.round_stats import round_statistics
        from cqopt.spark.session import running_session
        from cqopt.spark.trace_read import read_trace

        with running_session("local[2]", progress=False) as spark:
            frames = {}
            for trace, spec, query, paths, cat, file in todo:
                t0 = time.perf_counter()
                mine = {}
                for s in query.stream_names:
                    key = (str(paths[s]), s)
                    if key not in frames:
                        ts = "sec_since_0829_0000" if trace == "epa-http" else None
                        frames[key] = read_trace(spark, paths[s], cat.stream(s),
                                                 ts_column=ts)[0].cache()
                    mine[s] = frames[key]
                stats = round_statistics(query, mine, query.round_seconds())
                file.parent.mkdir(parents=True, exist_ok=True)
                write_round_statistics(stats, file)
                out[trace, spec.name] = (spec, stats, cat)
                print(f"{trace} {spec.name}: {len(stats)} rounds on Spark in "
                      f"{time.perf_counter() - t0:.1f} s", file=sys.stderr)
    return out


def _policies(mode: dict) -> dict:
    from cqopt.runtime.adaptive import Hysteresis
    from cqopt.runtime.choice import PricedSwitch

    hysteresis = {None: None, "margin": Hysteresis(), "priced": PricedSwitch()}[
        mode.get("hysteresis")]
    return {"choice": mode.get("choice", "point"), "fallback": mode.get("fallback"),
            "hysteresis": hysteresis}


def quality_table(stats: dict, args: argparse.Namespace) -> int:
    """Replay every (trace, query) in every mode; print the table and the targets' verdict."""
    from cqopt.replay.replay import exact_utilities, local_chart, replay

    header = (f"{'trace':<15} {'query':<5} {'mode':<25} {'chart':>7} {'BEST-ST':>7} "
              f"{'RATE':>7} {'ORACLE':>7} {'fid':>5} {'sw/600':>6} {'cells':>6} {'plans':>5}")
    print(header)
    print("-" * len(header))
    verdicts, estimator_rows = [], []
    for (trace, name), (spec, observed, catalog) in sorted(stats.items()):
        if (args.query and name not in args.query) or (args.trace and trace not in args.trace):
            continue
        chart = local_chart(spec, catalog)
        utilities = exact_utilities(chart, catalog, observed)
        cells = chart.cells_stored
        used = len(np.unique(chart.plan_index))
        rows = {}
        for mode_name, mode in MODES.items():
            s = replay(name, chart, catalog, observed, utilities=utilities,
                       **_policies(mode)).summary
            rows[mode_name] = s
            b = s["baselines"]
            print(f"{trace:<15} {name:<5} {mode_name:<25} {s['regret']:7.4f} "
                  f"{b['best_static']['regret']:7.4f} {b['rate']['regret']:7.4f} "
                  f"{b['oracle_chart']['regret']:7.4f} {s['fidelity']:5.2f} "
                  f"{s['switches'] * 600 / max(s['rounds'], 1):6.1f} {cells:6d} {used:5d}")
        for estimator in ESTIMATORS:
            s = replay(name, chart, catalog, observed, utilities=utilities,
                       estimator=estimator).summary
            estimator_rows.append((trace, name, estimator, s["regret"], s["fidelity"],
                                   s["baselines"]["oracle_chart"]["regret"]))
        verdicts.append((trace, name, rows))
    print()
    print("Estimators (point choice): regret / fidelity")
    by_key: dict = {}
    oracle: dict = {}
    for trace, name, estimator, regret, fidelity, oracle_regret in estimator_rows:
        by_key.setdefault((trace, name), {})[estimator] = (regret, fidelity)
        oracle[trace, name] = oracle_regret
    print(f"{'trace':<15} {'query':<5} " + " ".join(f"{e:>15}" for e in ESTIMATORS))
    wins = dict.fromkeys(ESTIMATORS, 0)
    for (trace, name), row in by_key.items():
        print(f"{trace:<15} {name:<5} " + " ".join(
            f"{row[e][0]:8.4f}/{row[e][1]:5.2f}" for e in ESTIMATORS))
        wins[min(ESTIMATORS, key=lambda e: row[e][0])] += 1
    print("lowest regret on: " + ", ".join(f"{e} {n}" for e, n in wins.items()))
    print("Target: the sampler's regret within 1.5x of the oracle chart's (+0.001)")
    for estimator in ("sample:0.1", "sample:0.02", "decay"):
        within = [key for key, row in by_key.items()
                  if row[estimator][0] <= 1.5 * oracle[key] + 1e-3]
        print(f"  {estimator:<12} {len(within)}/{len(by_key)}; ratio to the oracle's: "
              + ", ".join(f"{t}/{q} {by_key[t, q][estimator][0] / max(oracle[t, q], 1e-12):.2f}"
                          for t, q in by_key))
    print()
    print("Targets, per mode: chart regret <= half BEST-STATIC's where the headroom >= 1%; "
          "never > 10% above BEST-STATIC; Q1 switches per 600 rounds <= 23")
    for mode_name in MODES:
        half = [(t, q) for t, q, rows in verdicts if rows[mode_name]["headroom"] >= 0.01]
        half_ok = [(t, q) for t, q, rows in verdicts if (t, q) in half
                   and rows[mode_name]["regret"] <= rows[mode_name]["headroom"] / 2]
        above = [(t, q) for t, q, rows in verdicts
                 if rows[mode_name]["regret"] > 1.1 * rows[mode_name]["headroom"] + 1e-12]
        q1 = [rows[mode_name]["switches"] * 600 / rows[mode_name]["rounds"]
              for t, q, rows in verdicts if q == "Q1"]
        print(f"{mode_name:<25} half of BEST-STATIC: {len(half_ok)}/{len(half)}; "
              f"> 10% above BEST-STATIC: {len(above)} "
              f"({', '.join(f'{t}/{q}' for t, q in above) or '-'}); "
              f"Q1 switches/600 max {max(q1, default=float('nan')):.0f}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache", default="/tmp/cqopt-chart-quality", type=Path)
    parser.add_argument("--stats-only", action="store_true",
                        help="compute and cache the per-round statistics, then stop")
    parser.add_argument("--query", action="append", help="only these queries")
    parser.add_argument("--trace", action="append", help="only these trace sets")
    args = parser.parse_args(argv)
    stats = round_stats_cached(args.cache)
    if args.stats_only:
        for (trace, query), (_, frame, _) in sorted(stats.items()):
            print(f"{trace:<16} {query:<6} {len(frame)} rounds")
        return 0
    return quality_table(stats, args)


if __name__ == "__main__":
    sys.exit(main())
