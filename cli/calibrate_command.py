"""``cqopt calibrate``: measure OM's operator rates on Spark (or fit the engine model's
constants to a run's plan times) and write a catalog with them."""

from __future__ import annotations

import argparse
import sys

from cqopt.api import MAX_REPEATS, MAX_ROWS, MAX_SIZES
from cqopt.cli import options
from cqopt.cli.options import memory_size, number, option_namer

def cmd_calibrate(args: argparse.Namespace) -> int:
    from cqopt.api import calibrate

    def say(sentence: str) -> None:
        if not args.quiet:
            print(f"cqopt calibrate: {sentence}", file=sys.stderr, flush=True)

    done = calibrate(args.catalog, args.out, from_runs=args.from_run, smoothing=args.smoothing,
                     master=args.master, rows=args.rows, sizes=args.sizes,
                     repeats=args.repeats, driver_memory=args.driver_memory, progress=say,
                     name=option_namer(from_runs="--from-run"))
    print(done.text())
    if done.fitted is not None:
        print(f"wrote {done.out}; charts costed in the engine's seconds: cqopt build "
              f"--catalog {done.out} --model engine --weights 0,0,1 ...")
    else:
        print(f"wrote {done.out}")
    return 0


def add_parsers(sub) -> None:
    p = sub.add_parser(
        "calibrate", help="measure the operators' processing rates on Spark",
        description="Time selection-equality, selection-range, projection, equi-join and "
                    "aggregate on Spark over generated data of the catalog's column types at "
                    "several sizes, fit tuples/s per kind by least squares (the intercept is "
                    "Spark's per-job fixed cost, reported), and write a copy of the catalog "
                    "whose [operators] hold the measured rates. An existing --out is replaced "
                    "only if cqopt wrote it and nobody edited it since.")
    p.add_argument("--catalog", type=options.input_file, required=True,
                   help="stream catalog (TOML) to calibrate")
    p.add_argument("--out", required=True, metavar="CATALOG2", help="catalog (TOML) to write")
    p.add_argument("--master", type=options.master, default="local[*]",
                   help="Spark master URL (default local[*])")
    # On 2 cores a selection over a million cached rows takes less than Spark's per-job
    # cost, so the fit cannot tell them apart; 16 million rows time the operator.
    p.add_argument("--rows", type=number(integer=True, low=1000, high=MAX_ROWS),
                   default=16_000_000,
                   help="rows of the largest size; the others halve it (default 16,000,000)")
    p.add_argument("--sizes", type=number(integer=True, low=3, high=MAX_SIZES), default=4,
                   help="how many sizes, 3 or more: each is left out once to judge the fit on "
                        "(default 4)")
    p.add_argument("--repeats", type=number(integer=True, low=1, high=MAX_REPEATS), default=3,
                   help="runs per size; the median counts (default 3)")
    p.add_argument("--driver-memory", metavar="SIZE", default="6g", type=memory_size,
                   help="memory of a new Spark driver (default 6g): the generated data is "
                        "cached twice per size, and data spilled to disk would time the disk")
    p.add_argument("--from-run", action="append", metavar="DIR",
                   help="fit the engine model's [engine] constants to the plan times cqopt run "
                        "logged in DIR (repeatable; runs with --shadow time every plan), "
                        "without Spark, instead of timing operators")
    p.add_argument("--smoothing", type=number(above=0, high=1), default=None,
                   help="with --from-run: the new fit's weight against constants the catalog "
                        "already has from an earlier fit (default 0.5)")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    p.set_defaults(run=cmd_calibrate)
