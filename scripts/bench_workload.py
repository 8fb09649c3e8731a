"""Benchmark: a 10-query workload in one streaming query, against its queries run alone.

The workload is the example workload's Q1 and Q2 (examples/workload.toml)
plus eight variants over the README's three streams (other selections,
windows, aggregates, joins). Traces of ``--seconds`` seconds at the README's
rates (TCP 500/s, UDP 230/s, SF 150/s; join keys over 50 hosts) are written
one file per second and stream, and every run reads one file per stream per
micro-batch (``max_files_per_trigger=1``), so each micro-batch is one
second of input, as a live run with 1-s rounds sees it.

Per repeat, in one Spark session (so no run pays a JVM start; separate
applications would each pay 10-15 s more), alternating so that a busier
spell of the machine falls on every kind (the workload first in even
repeats, the queries alone first in odd ones):

- workload: the 10 queries as one :class:`~cqopt.spark.run.workload.WorkloadRun`;
- alone: each query as its own :class:`~cqopt.spark.run.AdaptiveRun`.

A warm-up run of each kind over the first ten seconds comes first, so that
neither side pays the session's first jobs (Spark compiles and loads its code
then: the first run of a session is about twice as slow per round). Its
per-round times are printed too: a live run pays them in its first minute.

Per-round time is the time a run spends in its micro-batches over their
number (seconds of input): the steady state a live run must keep up with.
Each run's start (its streaming query) and its final reports (a timeline
figure per query) are paid once, not per round: the "wall" line adds them.
Printed: the medians over repeats of the workload's per-round time, the
costliest query's alone, and the 10 alone runs' sum; and the medians of the
per-repeat ratios (targets: workload <= 2x the costliest; 10 runs >= 5x the
workload). The same again with Spark's own bookkeeping of each micro-batch
(its sources listed, its offset and commit logs written), which a one-query
run pays every round as the workload's one streaming query does: the median
gap between the starts of consecutive micro-batches. Ten one-query runs are
ten Spark applications: a last line adds each one's start (a Spark
application started and stopped in a new process, measured twice before the
repeats) to the whole trace, against the workload's one start.

With ``--queries N`` (N other than 10) the workload is Q1, Q2 and N - 2
variants (the eight again with other constants), their windows ``--round``
seconds (twice that for the 2-s ones), and files of ``--round`` seconds of
input: the run keeps up when a micro-batch takes at most ``--round`` s.

    python scripts/bench_workload.py [--seconds 10] [--repeat 3] [--k 4]
        [--master local[2]]
    python scripts/bench_workload.py --queries 100 --round 10 --seconds 60 --repeat 1
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from cqopt.catalog import load_catalog
from cqopt.charts.build import build_local
from cqopt.charts.lookup import load
from cqopt.charts.spec import workload_specs
from cqopt.charts.store import write_chart_set
from cqopt.charts.workload import load_workload
from cqopt.replay.trace_generate import generate_trace
from cqopt.replay.trace_write import write_trace_per_round

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
RATES = {"TCP": 500.0, "UDP": 230.0, "SF": 150.0}
VARIANTS = {  # eight more queries over the same streams
    "Q3": "SELECT UDP.src_host, UDP.bytes FROM UDP WHERE UDP.bytes > 500 WINDOW [1]",
    "Q4": "SELECT SF.dest_host FROM SF WHERE SF.dest_port = 80 WINDOW [2]",
    "Q5": "SELECT COUNT(*) FROM TCP WHERE TCP.bytes > 100 WINDOW [1]",
    "Q6": "SELECT TCP.dest_host, SUM(TCP.bytes) FROM TCP GROUP BY TCP.dest_host WINDOW [1]",
    "Q7": "SELECT * FROM TCP, UDP WHERE TCP.src_host = UDP.dest_host WINDOW [1]",
    "Q8": "SELECT UDP.dest_host, COUNT(*) FROM UDP GROUP BY UDP.dest_host WINDOW [2]",
    "Q9": "SELECT * FROM UDP, SF WHERE UDP.dest_host = SF.dest_host AND SF.bytes > 200 "
          "WINDOW [1]",
    "Q10": "SELECT TCP.src_host, TCP.dest_host FROM TCP WHERE TCP.dest_host = 7 WINDOW [1]",
}


def workload_text(k: int) -> str:
    text = (EXAMPLES / "workload.toml").read_text().replace("k = 10", f"k = {k}")
    for name, sql in VARIANTS.items():
        text += f'\n[[query]]\nname = "{name}"\nsql = """\n{sql}\n"""\n'
    return text


def setup(folder: Path, seconds: float, k: int, round_s: float = 1.0):
    catalog = load_catalog(EXAMPLES / "dec-pkt.toml")
    (folder / "workload.toml").write_text(workload_text(k))
    specs = workload_specs(load_workload(folder / "workload.toml"), catalog)
    write_chart_set(folder / "charts", build_local([s for s, _ in specs], catalog,
                                                   progress=False), catalog)
    keys = {"TCP": {"src_host": 50}, "UDP": {"dest_host": 50}, "SF": {"dest_host": 50}}
    for i, (stream, rate) in enumerate(RATES.items()):
        trace = generate_trace(catalog.stream(stream), seconds, seed=5 + i, mean_rate=rate,
                               steady=keys[stream])
        write_trace_per_round(trace, folder / "traces" / stream, round_s, start=0.0)
    charts = load(folder / "charts")
    return catalog, {s.name: (q, charts[s.name]) for s, q in specs}


def timed(make) -> tuple[float, float, float]:
    """A run's wall time (made before the clock starts), the part of it spent in its
    micro-batches (steady state: no start, no final report), and the median gap between
    its micro-batches' starts (each batch with Spark's own bookkeeping around it: the
    source listed, the offset and commit logs written)."""
    run = make()
    spent = [0.0]
    starts: list[float] = []
    batch = run._batch

    def timed_batch(frame, batch_id):
        began = time.perf_counter()
        starts.append(began)
        try:
            return batch(frame, batch_id)
        finally:
            spent[0] += time.perf_counter() - began
    run._batch = timed_batch
    began = time.perf_counter()
    run.run()
    gaps = [b - a for a, b in zip(starts, starts[1:])]
    return time.perf_counter() - began, spent[0], statistics.median(gaps) if gaps else 0.0


def many_variants(count: int) -> dict[str, str]:
    """``count`` queries: the eight variants again and again with other constants."""
    templates = list(VARIANTS.values())
    out = {}
    for i in range(count - 2):
        sql = templates[i % len(templates)]
        shift = i // len(templates)
        out[f"V{i + 3}"] = (sql.replace("> 500", f"> {500 + 7 * shift}")
                            .replace("> 100", f"> {100 + 7 * shift}")
                            .replace("= 80", f"= {80 + shift}")
                            .replace("= 7", f"= {7 + shift}")
                            .replace("> 200", f"> {200 + 7 * shift}"))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--k", type=int, default=4)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--queries", type=int, default=10,
                        help="10: the ten-query workload, timed against its queries alone; "
                             "more: a workload that large, timed alone (keep-up test)")
    parser.add_argument("--round", type=float, default=1.0,
                        help="the seconds of input per micro-batch (and the variants' "
                             "round, with --queries above 10)")
    args = parser.parse_args()

    from cqopt.spark.run import AdaptiveRun, RunSettings, Source
    from cqopt.spark.run.workload import WorkloadRun
    from cqopt.spark.session import spark_session

    if args.queries != 10:
        variants = {n: sql.replace("WINDOW [1]", f"WINDOW [{args.round:g}]")
                    .replace("WINDOW [2]", f"WINDOW [{2 * args.round:g}]")
                    for n, sql in many_variants(args.queries).items()}
        VARIANTS.clear()
        VARIANTS.update(variants)
    folder = Path(tempfile.mkdtemp(prefix="bench-workload-"))
    catalog, queries = setup(folder, args.seconds, args.k, args.round)
    sources = {s: Source.files(s, folder / "traces" / s) for s in RATES}
    settings = RunSettings(max_files_per_trigger=1)
    batches = len(list((folder / "traces" / "TCP").glob("*.parquet")))
    start = application_start(args.master) if args.queries == 10 else None
    spark = spark_session(args.master, progress=False)
    quiet = lambda _: None  # noqa: E731

    def workload(out: Path, given: dict) -> tuple[float, float, float]:
        return timed(lambda: WorkloadRun(spark, queries, catalog, given, out / "workload",
                                         settings, progress=quiet))

    def alone(out: Path, given: dict) -> tuple[dict, dict, dict]:
        steady, walls, gaps = {}, {}, {}
        for name, (query, chart) in queries.items():
            mine = {s: given[s] for s in query.stream_names}
            walls[name], steady[name], gaps[name] = timed(lambda: AdaptiveRun(
                spark, name, query, chart, catalog, mine, out / f"alone-{name}", settings,
                progress=quiet))
        return steady, walls, gaps

    rows = []
    try:
        warm = warm_up_sources(folder, sources)
        _, cold, _ = workload(folder / "warm-up", warm)
        first = f"first run of the session, per round: workload {cold / WARM_UP_FILES:.3f} s"
        if args.queries == 10:
            cold_alone, _, _ = alone(folder / "warm-up", warm)
            first += (f", then each query alone; costliest "
                      f"{max(cold_alone.values()) / WARM_UP_FILES:.3f} s")
        print(first + f" (warm-up over {WARM_UP_FILES} s, not counted)", flush=True)
        for rep in range(args.repeat):
            out = folder / f"rep-{rep}"
            if args.queries == 10 and rep % 2:
                steady_alone, walls, gaps = alone(out, sources)
            whole, steady, gap = workload(out, sources)
            row = {"workload": steady / batches, "workload_wall": whole / batches,
                   "workload_gap": gap}
            if args.queries == 10:
                if not rep % 2:
                    steady_alone, walls, gaps = alone(out, sources)
                costliest = max(steady_alone, key=steady_alone.get)
                row.update(costliest=steady_alone[costliest] / batches,
                           costliest_query=costliest,
                           ten_runs=sum(steady_alone.values()) / batches,
                           ten_runs_wall=sum(walls.values()) / batches,
                           costliest_gap=max(gaps.values()), ten_runs_gap=sum(gaps.values()))
                print(f"repeat {rep}: per round workload {row['workload']:.3f} s (wall "
                      f"{row['workload_wall']:.3f}), costliest alone ({costliest}) "
                      f"{row['costliest']:.3f} s, 10 runs {row['ten_runs']:.3f} s; with "
                      f"Spark's bookkeeping (median gap) workload {gap:.3f} s, costliest "
                      f"{row['costliest_gap']:.3f} s, 10 runs {row['ten_runs_gap']:.3f} s",
                      flush=True)
            else:
                print(f"repeat {rep}: {len(queries)} queries, per round {row['workload']:.3f} s "
                      f"(wall {row['workload_wall']:.3f}) for rounds of {args.round:g} s",
                      flush=True)
            rows.append(row)
    finally:
        spark.stop()
    report(rows, args, batches, len(queries), start)


# Seconds of input the warm-up runs read: over three, the first repeat still ran at
# twice the later ones' time per round (the JVM was still compiling the run's code).
WARM_UP_FILES = 10


def warm_up_sources(folder: Path, sources: dict) -> dict:
    """The sources over a copy of each stream's first :data:`WARM_UP_FILES` files."""
    import shutil

    from cqopt.spark.run import Source

    out = {}
    for stream in sources:
        target = folder / "warm-up-traces" / stream
        target.mkdir(parents=True)
        for path in sorted((folder / "traces" / stream).glob("*.parquet"))[:WARM_UP_FILES]:
            shutil.copy(path, target / path.name)
        out[stream] = Source.files(stream, target)
    return out


def application_start(master: str) -> float:
    """Seconds to start and stop a Spark application in a new process (its JVM, its
    session), the median of two: what each of 10 one-query applications pays once."""
    code = ("import time; b = time.perf_counter(); from cqopt.spark.session import "
            f"spark_session; spark_session({master!r}, progress=False).stop(); "
            "print(time.perf_counter() - b)")
    seconds = []
    for _ in range(2):
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              check=True)
        seconds.append(float(done.stdout.strip().splitlines()[-1]))
    return statistics.median(seconds)


def report(rows: list[dict], args, batches: int, count: int,
           start: float | None = None) -> None:
    keys = [k for k in ("workload", "workload_wall", "workload_gap", "costliest", "ten_runs",
                        "ten_runs_wall", "costliest_gap", "ten_runs_gap") if k in rows[0]]
    med = {k: statistics.median(r[k] for r in rows) for k in keys}
    print(f"\n{count} queries, {batches} micro-batches of {args.round:g} s of input, "
          f"{args.repeat} repeats, {args.master}; per-round medians (time in micro-batches; "
          "wall adds the start and the final reports):")
    print("| run | s per round |\n|---|---|")
    print(f"| workload (one streaming query) | {med['workload']:.3f} |")
    print(f"| workload, wall | {med['workload_wall']:.3f} |")
    print(f"| workload, with Spark's bookkeeping (median gap) | {med['workload_gap']:.3f} |")
    if "costliest" not in med:
        verdict = "keeps up" if med["workload"] <= args.round else "falls behind"
        print(f"{count} queries: {med['workload']:.3f} s per {args.round:g}-s round: {verdict}")
        return
    print(f"| costliest query alone | {med['costliest']:.3f} |")
    print(f"| 10 one-query runs (sum, no JVM starts) | {med['ten_runs']:.3f} |")
    over = statistics.median(r["workload"] / r["costliest"] for r in rows)
    faster = statistics.median(r["ten_runs"] / r["workload"] for r in rows)
    print(f"| costliest query alone, with Spark's bookkeeping | {med['costliest_gap']:.3f} |")
    print(f"| 10 one-query runs, with Spark's bookkeeping | {med['ten_runs_gap']:.3f} |")
    print(f"median ratio workload / costliest alone: {over:.2f} (target <= 2)")
    print(f"median ratio 10 runs / workload: {faster:.2f} (target >= 5)")
    # Each one-query run pays Spark's bookkeeping of a micro-batch (its sources listed, its
    # offset and commit logs written) every round, as the workload's one streaming query does
    # once: what a live run pays per round, start and final report left out.
    over_gap = statistics.median(r["workload_gap"] / r["costliest_gap"] for r in rows)
    faster_gap = statistics.median(r["ten_runs_gap"] / r["workload_gap"] for r in rows)
    print(f"with Spark's bookkeeping of each micro-batch (median gap between micro-batches): "
          f"workload / costliest alone {over_gap:.2f}, 10 runs / workload {faster_gap:.2f}")
    # Ten one-query runs are ten Spark applications, each starting its own JVM: over the
    # whole trace, what the two ways cost with their starts.
    ten = 10 * start + med["ten_runs_wall"] * batches
    one = start + med["workload_wall"] * batches
    print(f"whole trace of {batches} s with application starts ({start:.1f} s each): "
          f"10 one-query applications {ten:.1f} s, the workload {one:.1f} s: "
          f"{ten / one:.2f}x (per round, without starts, above: {faster:.2f}x)")


if __name__ == "__main__":
    main()
