"""``cqopt calibrate``: measure OM's operator rates on Spark (or fit the engine model's
constants to a run's plan times) and write a catalog with them."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from cqopt.catalog import load_catalog
from cqopt.cli import options
from cqopt.cli.options import memory_size, number

# Bounds a calibration fits in: Spark's DataFrame.range and a 2-core machine's patience.
MAX_ROWS = 2**31 - 1  # rows of the largest size
MAX_SIZES = 20  # sizes halve: the 20th of 2^31 rows is 2,048
MAX_REPEATS = 100


def cmd_calibrate(args: argparse.Namespace) -> int:
    from cqopt.spark.calibrate import calibrate, check_out, write_catalog
    from cqopt.spark.session import running_session

    out = Path(args.out)
    check_out(out, args.catalog)  # before Spark starts
    catalog = load_catalog(args.catalog)
    if args.from_run:
        return _from_runs(args, catalog, out)

    def say(sentence: str) -> None:
        if not args.quiet:
            print(f"cqopt calibrate: {sentence}", file=sys.stderr, flush=True)

    say(f"starting Spark ({args.master})")
    conf = {"spark.driver.memory": args.driver_memory} if args.driver_memory else None
    with running_session(args.master, progress=False, conf=conf) as spark:
        result = calibrate(spark, catalog, max_rows=args.rows, sizes=args.sizes,
                           repeats=args.repeats, progress=say)
    write_catalog(catalog, result, out)
    print(f"Measured on {result.where}, {result.when}")
    print(f"{'kind':<20} {'catalog rate':>13} {'measured rate':>14} {'fixed s':>8} "
          f"{'fixed share':>11} {'held-out error':>14}")
    for kind, fit in result.fits.items():
        print(f"{kind:<20} {getattr(catalog.operators, kind):13,.0f} {fit.rate:14,.0f} "
              f"{fit.fixed:8.3f} {fit.fixed_share:11.0%} {fit.held_out_error:14.1%}")
        print("    " + ", ".join(f"{rows:,} tuples {seconds:.3f} s"
                                 for rows, seconds in zip(fit.rows, fit.seconds)))
    print(f"wrote {out}")
    return 0


def _from_runs(args: argparse.Namespace, catalog, out: Path) -> int:
    """``--from-run``: the engine model's constants fitted to runs' plan times; no Spark."""
    from cqopt.spark.engine_fit import fit_runs, write_fitted_catalog

    fit = fit_runs(args.from_run, catalog, alpha=args.smoothing)
    where = ", ".join(args.from_run)
    write_fitted_catalog(catalog, fit, out, where)
    for line in fit.summary_lines():
        print(line)
    print(f"{'constant':<12} {'was':>10} {'fitted':>10}  (seconds)")
    for name in type(fit.constants).__dataclass_fields__:
        print(f"{name:<12} {getattr(catalog.engine, name):10.3g} "
              f"{getattr(fit.constants, name):10.3g}")
    print(f"wrote {out}; charts costed in the engine's seconds: cqopt build --catalog {out} "
          "--model engine --weights 0,0,1 ...")
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
    p.add_argument("--smoothing", type=number(above=0, high=1), default=0.5,
                   help="with --from-run: the new fit's weight against constants the catalog "
                        "already has from an earlier fit (default 0.5)")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    p.set_defaults(run=cmd_calibrate)
