"""``cqopt build``, ``cqopt choose`` and ``cqopt show``: charts from the command line.

Each command parses its options, calls its :mod:`cqopt.api` function and prints what
it returns.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from cqopt.cli import options
from cqopt.cli.options import (
    dialect,
    number,
    option_namer,
    option_text,
    whole_number,
    with_parent,
)
from cqopt.costmodel import model_names
from cqopt.errors import CqoptError, parse_number, shorten
from cqopt.location import local_output
from cqopt.optimizer.query.statistics import check_value, split_name


def parse_stat(text: str) -> tuple[str, float]:
    """``NAME=VALUE`` of ``--stat``, checked (the ``type`` of ``--stat`` and ``--at``, so a
    bad one is refused as the command line is read)."""
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise CqoptError(f"--stat {text!r}: expected NAME=VALUE, e.g. rate.TCP=500")
    split_name(name)
    return name, check_value(name, value)


def parse_weights(text: str | None) -> list[float] | None:
    """``--weights WR,WM[,WC]`` as numbers; the API judges them (the chart settings' judge,
    :func:`cqopt.charts.settings.judge_options`)."""
    if text is None:
        return None
    try:
        return [parse_number(w, "") for w in text.split(",")]
    except CqoptError:
        raise CqoptError(f"--weights {shorten(text, 60)!r}: expected WR,WM or WR,WM,WC "
                         "numbers in ASCII digits, e.g. 0.4,0.6") from None


def _percentiles(text: str) -> tuple[float, float]:
    """``--percentiles 5,95``: two numbers 0 <= LO < HI <= 100."""
    parts = text.split(",")
    try:
        lo, hi = (parse_number(p, "", low=0, high=100) for p in parts)
    except (CqoptError, ValueError):
        raise argparse.ArgumentTypeError(f"{shorten(text, 40)!r}: expected LO,HI with "
                                         "0 <= LO < HI <= 100, e.g. 5,95") from None
    if not lo < hi:
        raise argparse.ArgumentTypeError(f"{shorten(text, 40)!r}: LO must be below HI")
    return lo, hi


def cmd_build(args: argparse.Namespace) -> int:
    from cqopt.api import build

    start = time.perf_counter()
    charts = build(args.catalog, args.workload, args.out, engine=args.engine, k=args.k,
                   model=args.model, weights=parse_weights(args.weights), refine=args.refine,
                   depth=args.depth, reduce=args.reduce, ranges_from=args.ranges_from,
                   percentiles=tuple(with_parent(args, "--percentiles", "--ranges-from",
                                                 (5.0, 95.0))),
                   master=args.master, force=args.force,
                   progress=not args.quiet, name=lambda key, _: option_text(args, key))
    out = local_output(args.out, "chart set")
    total = time.perf_counter() - start
    print(f"{'query':<16} {'plans':>5} {'cells':>9} {'plans used':>10} {'seconds':>8}")
    for chart in charts:  # cells: the regions stored (a refined chart's leaves)
        cells = chart.plan_index.size
        print(f"{chart.spec.name:<16} {len(chart.plan_ids):5d} {cells:9d} "
              f"{chart.plans_used:10d} {chart.seconds:8.2f}")
        if chart.reduction:
            r = chart.reduction
            print(f"{chart.spec.name}: reduced at lambda {r['lambda']:g}: {r['plans_before']} "
                  f"plans -> {r['plans_after']}, cost at most {r['max_cost_increase']:.1%} "
                  "above the optimum")
    for chart in charts:  # no silent defaults: every fixed statistic and where it came from
        for stat, value in chart.spec.fixed.items():
            print(f"{chart.spec.name}: fixed {stat} = {value:g} "
                  f"({chart.spec.sources.get(stat, 'default')})")
    engine = json.loads((out / "manifest.json").read_text(encoding="utf-8"))["engine"]
    print(f"wrote {out} ({len(charts)} charts, {engine} engine, {total:.1f} s)")
    return 0


def cmd_choose(args: argparse.Namespace) -> int:
    from cqopt.api import choose

    chosen = choose(args.charts, args.query, dict(args.stat or []), catalog=args.catalog,
                    allow_stale=args.allow_stale, sql_out=args.sql_out,
                    warn=lambda line: print(f"cqopt: warning: {line}", file=sys.stderr),
                    name=option_namer())
    if args.json:
        print(json.dumps(chosen.to_dict(), ensure_ascii=False))
        return 0
    print(chosen.text())
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    from cqopt.api import show

    shown = show(args.charts, args.query, args.out, at=dict(args.at or []), plans=args.plans,
                 name=option_namer(at="--stat"))
    if shown.plans is not None:
        print(shown.plans)
    if shown.path is not None:
        print(f"wrote {shown.path}")
    return 0


def add_parsers(sub) -> None:
    """Add ``build``, ``choose`` and ``show`` to the subcommands ``sub``."""
    _add_build(sub)
    _add_choose(sub)
    _add_show(sub)


def _add_build(sub) -> None:
    p = sub.add_parser(
        "build", help="build the plan charts of a workload (a Spark batch job)",
        description="Cost every candidate plan of every workload query at the centroid of "
                    "every chart region and store the cheapest, as a chart set directory "
                    "(manifest.json + Parquet). Runs on Spark (--master, default local[*]) "
                    "or in this process (--engine local).")
    p.add_argument("--catalog", type=options.input_file, required=True,
                   help="stream catalog (TOML)")
    p.add_argument("--workload", type=options.input_file, required=True,
                   help="workload (TOML) of named queries")
    p.add_argument("--out", required=True, metavar="DIR", help="chart set directory to write")
    p.add_argument("--k", type=whole_number,
                   help="regions per axis, for every query (default: the workload's, else 10)")
    p.add_argument("--ranges-from", metavar="FOLDER",
                   help="axes spanning what was observed: a folder of the streams' traces "
                        "(STREAM.csv, STREAM.parquet, ...; their per-round statistics computed "
                        "on Spark) or of per-round statistics, one QUERY.parquet per query "
                        "(cqopt fidelity writes REPORT/rounds); each range set is said")
    p.add_argument("--percentiles", metavar="LO,HI", type=_percentiles,
                   help="with --ranges-from: the percentiles an axis spans (default 5,95)")
    p.add_argument("--model", metavar="MODEL",
                   help=f"cost model: {', '.join(model_names())} (default: the workload's, "
                        "else om)")
    p.add_argument("--weights", metavar="WR,WM[,WC]",
                   help="utility weights (default: the workload's, else 0.4,0.6)")
    p.add_argument("--refine", type=number(integer=True), metavar="BUDGET",
                   help="adaptive refinement instead of a k-regular grid: start at 2 regions "
                        "per axis and split only where the best plan changes, up to BUDGET "
                        "regions per chart")
    p.add_argument("--depth", type=number(integer=True), metavar="D",
                   help="with --refine: at most D splits of a coarse region (default: the "
                        "deepest whose lookup index has at most 2^20 cells)")
    p.add_argument("--reduce", type=number(), metavar="LAMBDA",
                   help="anorexic reduction: a region may take a plan used elsewhere that "
                        "costs at most (1 + LAMBDA) x its optimum, LAMBDA in [0, 1), e.g. 0.1")
    p.add_argument("--master", type=options.master, default="local[*]",
                   help="Spark master URL (default local[*])")
    p.add_argument("--engine", choices=["auto", "spark", "local"], default="auto",
                   help="spark, or local (the same kernel in this process); by default "
                        "Spark for a cluster --master, else the charts' size picks, said on "
                        "stderr: this process when the cells take less than Spark's start-up "
                        "would cost")
    p.add_argument("--force", action="store_true", help="replace an existing --out")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.set_defaults(run=cmd_build)


def _add_choose(sub) -> None:
    p = sub.add_parser(
        "choose", help="look up the chart's plan for given statistics",
        description="Load a chart set and print the plan its chart holds for the given "
                    "statistics; values outside the chart are clamped to its edge and "
                    "reported.")
    p.add_argument("--charts", required=True, metavar="DIR", help="chart set directory")
    p.add_argument("--query", required=True, metavar="NAME", help="query name")
    p.add_argument("--stat", action="append", metavar="NAME=VALUE", type=parse_stat,
                   help="a statistic, e.g. rate.TCP=500 (repeat for each chart axis)")
    p.add_argument("--catalog", type=options.input_file, metavar="CATALOG",
                   help="refuse charts built from a catalog with other costs (see "
                        "--allow-stale)")
    p.add_argument("--allow-stale", action="store_true",
                   help="with --catalog: look up in charts of another catalog anyway, warned")
    p.add_argument("--json", action="store_true",
                   help="print {query, plan, cell, clamped} as JSON")
    p.add_argument("--sql-out", metavar="DIALECT", type=dialect,
                   help="also print the chosen plan as SQL of this sqlglot dialect (spark, "
                        "hive, postgres, duckdb, ...), as explain --sql-out does")
    # The old spelling, kept for one release (--sql is the query in explain).
    p.add_argument("--sql", dest="sql_out", metavar="DIALECT", type=dialect,
                   action=options.OldSpelling, new="--sql-out")
    p.set_defaults(run=cmd_choose)


def _add_show(sub) -> None:
    p = sub.add_parser(
        "show", help="draw a query's plan diagram (PNG)",
        description="Draw the plan diagram of one query: every region coloured by its plan, "
                    "plans numbered P1..Pn by their share of the chart's area, the fixed "
                    "statistics in the title; charts of 3 or more axes as 2-D slices, the "
                    "title saying which and why. --plans prints each plan's tree.")
    p.add_argument("--charts", required=True, metavar="DIR", help="chart set directory")
    p.add_argument("--query", required=True, metavar="NAME", help="query name")
    p.add_argument("--out", metavar="FILE.png", help="image to write (.png, .svg or .pdf); "
                   "an existing file is replaced only if cqopt wrote it")
    p.add_argument("--quiet", action="store_true",
                   help="no progress on stderr (show has none to say; every command takes it)")
    p.add_argument("--plans", action="store_true",
                   help="print each plan's number (P1 covers the most area), its share of the "
                        "chart and its tree, as the diagram's legend numbers them")
    p.add_argument("--stat", action="append", metavar="NAME=VALUE", type=parse_stat,
                   dest="at",
                   help="for 3+ axes: slice at this value of an axis beyond the first two")
    # The old spelling, kept for one release: --stat names a statistic everywhere else.
    p.add_argument("--at", metavar="NAME=VALUE", type=parse_stat, dest="at",
                   action=options.OldSpelling, new="--stat", append=True)
    p.set_defaults(run=cmd_show)
