"""Benchmark: what loading a chart set costs in time and memory.

1. A large chart: the OM paper's Q1 on a sel-λ grid of ``--cells`` cells
   (default 64 million, k = 8000 per axis), built in-process and written once
   into a temporary folder. A fresh process then imports cqopt and pyarrow,
   reads its resident set size (RSS), loads the set with :func:`cqopt.load`,
   looks one plan up, and reads its RSS again: the bytes per cell above the
   footprint before the load, and the load's wall time, first and again
   (medians of ``--repeat`` fresh processes).
2. Plans at load: a set holding one single-stream chart against one holding
   a 7-stream chain join (both k = 2), loaded in turn ``--load-repeat`` times
   in this process: the 7-stream set's median load time over the one-stream
   set's, in wall time and in the process's CPU time (steadier on a shared
   machine).

    python scripts/bench_load.py [--cells 64000000] [--repeat 5] [--load-repeat 200]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import cqopt
from cqopt.catalog import Catalog, load_catalog
from cqopt.charts.build import build_local
from cqopt.charts.spec import workload_specs
from cqopt.charts.store import write_chart_set
from cqopt.charts.workload import workload_from_dict

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
Q1 = "SELECT TCP.src_host, TCP.dest_host FROM TCP WHERE TCP.dest_host = 2 WINDOW [1]"
CHAIN7 = ("SELECT * FROM S0, S1, S2, S3, S4, S5, S6 WHERE S0.a = S1.b AND S1.a = S2.b "
          "AND S2.a = S3.b AND S3.a = S4.b AND S4.a = S5.b AND S5.a = S6.b WINDOW [1]")
ONE = "SELECT S0.a FROM S0 WHERE S0.b = 3 WINDOW [1]"

# Run in a fresh process: RSS before and after the load, and its time.
MEASURE = """
import json, sys, time
import numpy, pyarrow, pyarrow.parquet, networkx, sqlglot
import cqopt, cqopt.charts.lookup, cqopt.optimizer.rules.enumerate, cqopt.optimizer.query.logical

def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096

before = rss()
start = time.perf_counter()
charts = cqopt.load(sys.argv[1])
seconds = time.perf_counter() - start
charts.choose("Q1", {"sel.TCP": 0.3, "rate.TCP": 500.0})
after = rss()
del charts
start = time.perf_counter()
cqopt.load(sys.argv[1])
print(json.dumps({"before": before, "after": after, "seconds": seconds,
                  "again": time.perf_counter() - start}))
"""


def spec_set(catalog: Catalog, queries: list[dict]):
    return [s for s, _ in workload_specs(workload_from_dict({"query": queries}), catalog)]


def large_chart(folder: Path, cells: int, repeat: int) -> None:
    dec = load_catalog(EXAMPLES / "dec-pkt.toml")
    k = math.isqrt(cells)
    specs = spec_set(dec, [{"name": "Q1", "sql": Q1, "k": k}])
    start = time.perf_counter()
    built = build_local(specs, dec, progress=False)
    write_chart_set(folder / "large", built, dec)
    print(f"Q1 on a {k} x {k} grid: {k * k} cells, built and written in "
          f"{time.perf_counter() - start:.1f} s", flush=True)
    del built
    runs = []
    for _ in range(repeat):
        done = subprocess.run([sys.executable, "-c", MEASURE, str(folder / "large")],
                              capture_output=True, text=True, check=True)
        runs.append(json.loads(done.stdout))
    per_cell = statistics.median((r["after"] - r["before"]) / (k * k) for r in runs)
    seconds = statistics.median(r["seconds"] for r in runs)
    again = statistics.median(r["again"] for r in runs)
    before = statistics.median(r["before"] for r in runs) / 2**20
    print(f"load, median of {repeat} fresh processes (cqopt, pyarrow, networkx and sqlglot "
          f"imported before): first {seconds:.2f} s, again {again:.2f} s; RSS {before:.0f} "
          f"MiB before, {per_cell:.2f} bytes per cell above it (targets: at most 4 bytes a "
          "cell; a load in under 1 s)", flush=True)


def plans_at_load(folder: Path, repeat: int) -> dict[str, float]:
    """Median load times (wall and CPU seconds) of a one-stream and a 7-stream set, and
    their ratios: the two loads alternate, so a busier spell of the machine falls on both."""
    streams = {f"S{i}": {"rate": [10, 1000], "columns": {"a": "int", "b": "int"}}
               for i in range(7)}
    catalog = Catalog.from_dict({"streams": streams}, "<generated>")
    sets = {}
    for name, sql in (("one stream", ONE), ("7-stream join", CHAIN7)):
        out = folder / name.replace(" ", "-")
        write_chart_set(out, build_local(spec_set(catalog, [{"name": "Q", "sql": sql, "k": 2}]),
                                         catalog, progress=False), catalog)
        sets[name] = out
        cqopt.load(out)  # warm: imports, the file cache
    wall = {name: [] for name in sets}
    cpu = {name: [] for name in sets}
    for _ in range(repeat):
        for name, out in sets.items():
            start, start_cpu = time.perf_counter(), time.process_time()
            cqopt.load(out)
            cpu[name].append(time.process_time() - start_cpu)
            wall[name].append(time.perf_counter() - start)
    times = {}
    for name, out in sets.items():
        times[name] = statistics.median(wall[name])
        times[name + " cpu"] = statistics.median(cpu[name])
        print(f"{name:14} {len(cqopt.load(out)['Q'].plans):4d} plans, load "
              f"{times[name] * 1e3:8.2f} ms wall, {times[name + ' cpu'] * 1e3:8.2f} ms CPU",
              flush=True)
    times["ratio"] = times["7-stream join"] / times["one stream"]
    times["ratio cpu"] = times["7-stream join cpu"] / times["one stream cpu"]
    print(f"7-stream set / one-stream set: {times['ratio']:.2f}x wall, {times['ratio cpu']:.2f}x "
          f"CPU, medians of {repeat} alternating loads (target: at most 1.5x; the plans are "
          "stored, so load neither parses nor enumerates)", flush=True)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", type=int, default=64_000_000, help="cells of the large chart")
    parser.add_argument("--repeat", type=int, default=5, help="timed loads of the large chart")
    parser.add_argument("--load-repeat", type=int, default=200,
                        help="alternating loads of the one-stream and 7-stream sets")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="cqopt-bench-load-") as tmp:
        plans_at_load(Path(tmp), args.load_repeat)
        large_chart(Path(tmp), args.cells, args.repeat)


if __name__ == "__main__":
    main()
