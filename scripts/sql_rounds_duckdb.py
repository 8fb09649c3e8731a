"""What the SQL means on whole tables: a query's plans in DuckDB over a whole trace.

For each candidate plan of one query of a workload, prints the rows its
round-carrying SQL (``plan_sql``) gives on the whole trace, the rows the
one-round SQL (``one_round=True``, which relates no tuple to a round) gives
on the same tables, and the rows the reference executor gives round by
round, which the first must equal. Also the median time of the rounds SQL
and its ratio to the first plan's, measured in the same run.

Without a trace folder, it generates the README demo's trace (60 s of the
DEC-PKT streams, join keys steady) in a temporary folder first::

    python scripts/sql_rounds_duckdb.py [TRACE] [--query Q2] [--repeat 3]

where TRACE is a folder of STREAM.parquet files, such as::

    cqopt generate --catalog examples/dec-pkt.toml --out out/traces --duration 60 \\
        --steady TCP.src_host --steady UDP.dest_host --steady SF.dest_host
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import duckdb
import pandas as pd

from cqopt.catalog import load_catalog
from cqopt.charts.workload import load_workload
from cqopt.costmodel.reference_executor import execute
from cqopt.examples import example
from cqopt.optimizer.plans.sql import plan_sql
from cqopt.optimizer.query.logical import parse_query
from cqopt.optimizer.rules.enumerate import enumerate_plans
from cqopt.replay.rounds import round_of


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace", type=Path, nargs="?",
                        help="a directory of STREAM.parquet files (default: 60 s generated "
                             "here, as the README's demo generates them)")
    parser.add_argument("--catalog", default=example("dec-pkt.toml"))
    parser.add_argument("--workload", default=example("workload.toml"))
    parser.add_argument("--query", default="Q2")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    if args.trace is None:
        from cqopt.api import generate

        args.trace = Path(tempfile.mkdtemp()) / "traces"
        generate(args.catalog, args.trace, duration=60, progress=False,
                 steady=["TCP.src_host", "UDP.dest_host", "SF.dest_host"])
        print(f"generated 60 s of every stream in {args.trace}")

    catalog = load_catalog(args.catalog)
    sql = next(q.sql for q in load_workload(args.workload).queries if q.name == args.query)
    query = parse_query(sql, catalog)
    round_s = query.window.seconds
    data = {s: pd.read_parquet(args.trace / f"{s}.parquet") for s in query.stream_names}
    start = min(float(f.ts.min()) for f in data.values())
    con = duckdb.connect()
    for stream, frame in data.items():
        con.register(stream, frame)

    def count(text: str) -> int:
        return con.execute(f"SELECT COUNT(*) FROM ({text})").fetchone()[0]

    baseline = None
    for plan in enumerate_plans(query):
        text = plan_sql(plan, "duckdb", query=query)  # rounds from the first tuple, as start
        times = []
        for _ in range(args.repeat):
            began = time.perf_counter()
            rows = count(text)
            times.append(time.perf_counter() - began)
        median = statistics.median(times)
        baseline = baseline or median
        whole = count(plan_sql(plan, "duckdb", query=query, one_round=True))
        print(f"{plan.id}: rounds SQL {rows} rows, median {median:.3f} s "
              f"({median / baseline:.2f}x the first plan's); one-round SQL on the whole "
              f"tables {whole} rows")
    rounds = {s: f.ts.map(lambda t: round_of(t, start, round_s)) for s, f in data.items()}
    last = max(int(r.max()) for r in rounds.values())
    plan = enumerate_plans(query)[0]
    total = sum(len(execute(plan, query, {s: f[rounds[s] == r] for s, f in data.items()})
                    .result) for r in range(last + 1))
    print(f"reference executor, {last + 1} rounds one by one: {total} rows")


if __name__ == "__main__":
    main()
