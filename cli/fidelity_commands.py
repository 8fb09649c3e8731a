"""``cqopt generate`` and ``cqopt fidelity``: traces, and replaying them through charts."""

from __future__ import annotations

import argparse
import json
import sys

from cqopt.charts.overload_settings import DELTA
from cqopt.cli import options
from cqopt.cli.options import number, option_namer, pairs, whole_number, with_parent
from cqopt.cli.policy_options import (
    add_policy_arguments,
    check_policy_options,
    describe_policy,
    policy_options,
)
from cqopt.errors import CqoptError, parse_number, shorten
from cqopt.location import local_output

DEFAULT_K_SWEEP = "2,5,10,20,40"


def cmd_generate(args: argparse.Namespace) -> int:
    from cqopt.api import generate

    out = generate(args.catalog, args.out,
                   streams=args.streams.split(",") if args.streams is not None else None,
                   duration=args.duration, seed=args.seed, rate_cv=args.rate_cv,
                   interarrivals=args.interarrivals,
                   offset=with_parent(args, "--offset", "--interarrivals", 0.0),
                   rate_scale=pairs(args.rate_scale, "--rate-scale"), steady=args.steady,
                   format=args.format, file_per_round=args.file_per_round, force=args.force,
                   progress=not args.quiet, name=option_namer())
    print(f"wrote {out}")
    return 0


def cmd_fidelity(args: argparse.Namespace) -> int:
    from cqopt.api import FidelityOptions, fidelity
    from cqopt.replay.report import (
        alarm_line,
        deadline_line,
        headline,
        memory_line,
        negotiation_line,
        query_alarms,
        shared_alarms,
        summary_json,
    )
    from cqopt.replay.replay import off_chart_line

    check_policy_options(args)  # before any work starts
    ks = [] if args.k_sweep.lower() == "none" else _int_list(args.k_sweep, "--k-sweep")
    traces, times = pairs(args.trace, "--trace"), pairs(args.ts_column, "--ts-column")
    label = option_namer()
    settings = FidelityOptions(
        k=args.k, k_sweep=ks, rounds=args.rounds, queries=args.query,
        replay_options={"seed": args.seed, **policy_options(args)},
        describe=describe_policy(args), master=args.master, deadline=args.deadline,
        min_kept=args.min_kept, delta=args.delta, memory_budget=args.memory_budget,
        window_min=with_parent(args, "--window-min", "--memory-budget", 0.25),
        negotiate=args.negotiate, name=label)
    replays = fidelity(args.catalog, args.workload, args.out, traces=traces,
                       trace_dir=args.traces, ts_columns=times, charts=args.charts,
                       options=settings, force=args.force, progress=not args.quiet,
                       name=label)
    if args.json:
        print(json.dumps(summary_json(replays), indent=2, ensure_ascii=False))
        return 0
    print(f"{'query':<10} {'method':<18} {'rounds':>6} {'regret':>8} {'mean':>8} "
          f"{'fidelity':>8} {'within1%':>8} {'moves':>6} {'switches':>8}")
    for name, r in replays.items():
        s = r.summary
        for method, b in (("chart", s), *s["baselines"].items()):
            print(f"{name if method == 'chart' else '':<10} {method:<18} {b['scored_rounds']:6d} "
                  f"{b['regret']:8.4f} {b['mean_regret']:8.4f} {b['fidelity']:8.3f} "
                  f"{b['near_fidelity']:8.3f} {b.get('moves', ''):>6} {b['switches']:>8}")
        print(f"{'':<10} {headline(s)}")
        if s.get("off_chart_rounds"):
            print(f"{'':<10} {off_chart_line(s)}")
        if "deadline" in s:
            print(f"{'':<10} {deadline_line(s['deadline'])}")
        for alarm in query_alarms(s):
            print(alarm_line(alarm, name), file=sys.stderr)
    memory = next((r.summary["memory"] for r in replays.values() if "memory" in r.summary), None)
    if memory is not None:
        print(memory_line(memory))
    shared = next((r.summary["negotiation"] for r in replays.values()
                   if "negotiation" in r.summary), None)
    if shared is not None:
        print(negotiation_line(shared))
        for alarm in shared_alarms(replays):
            print(alarm_line(alarm), file=sys.stderr)
    out = local_output(args.out, "report")  # a file: URI, said as the folder it names
    print(f"wrote {out / 'report.md'} and {out / 'report.html'}")
    return 0


def _int_list(text: str, option: str) -> list[int]:
    """``--k-sweep 2,5,10`` as numbers; :class:`cqopt.api.FidelityOptions` judges each as
    a k."""
    try:
        values = [parse_number(v, "", integer=True) for v in text.split(",")]  # no "2,,5"
    except CqoptError:
        raise CqoptError(f"{option} {shorten(text, 60)!r}: expected whole numbers in ASCII "
                         "digits, like 2,5,10") from None
    if not values:
        raise CqoptError(f"{option} {text!r}: expected whole numbers >= 1")
    return values


def add_parsers(sub) -> None:
    """Add ``generate`` and ``fidelity`` to the subcommands ``sub``."""
    _add_generate(sub)
    _add_fidelity(sub)


def _add_generate(sub) -> None:
    p = sub.add_parser(
        "generate", help="generate seeded stream traces for the catalog's streams",
        description="Write one trace per stream: bursty arrivals (a Markov-modulated Poisson "
                    "process, or real inter-arrival times from a file) and Zipf-skewed values "
                    "whose mix drifts, so that rates and selectivities move.")
    p.add_argument("--catalog", type=options.input_file, required=True,
                   help="stream catalog (TOML)")
    p.add_argument("--out", required=True, metavar="DIR", help="directory for the traces")
    p.add_argument("--streams", metavar="A,B", help="streams to generate (default: all)")
    p.add_argument("--duration", type=number(above=0), default=600.0,
                   help="seconds (default 600)")
    p.add_argument("--seed", type=number(integer=True, low=0), default=0,
                   help="random seed (default 0)")
    p.add_argument("--rate-cv", type=number(low=0), default=0.25,
                   help="coefficient of variation of the arrival rate (default 0.25)")
    p.add_argument("--interarrivals", metavar="FILE",
                   help="reuse real inter-arrival times from a CSV (e.g. DEC-PKT-1 UDP)")
    p.add_argument("--offset", type=number(low=0), metavar="SECONDS",
                   help="where in --interarrivals the first stream starts; stream i replays "
                        "the stretch from OFFSET + i * DURATION (default 0)")
    p.add_argument("--rate-scale", action="append", metavar="STREAM=FACTOR",
                   help="multiply a stream's arrival rate (repeatable; default 1)")
    p.add_argument("--steady", action="append", metavar="STREAM.COLUMN[=DOMAIN]",
                   help="an int column drawn uniformly from 1..DOMAIN (default 1000) with no "
                        "drift, e.g. join keys (repeatable)")
    p.add_argument("--format", default="parquet", metavar="FORMAT",
                   help="trace file format: parquet (default), csv, dec or another "
                        "registered one (cqopt.replay.trace_format)")
    p.add_argument("--file-per-round", type=number(above=0), metavar="SECONDS",
                   help="write each stream as a directory OUT/STREAM of one file per SECONDS "
                        "of trace time (part-00000.parquet, ...), all streams from one origin, "
                        "for cqopt run's streaming file sources")
    p.add_argument("--force", action="store_true", help="replace an existing --out")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    p.set_defaults(run=cmd_generate)


def _add_fidelity(sub) -> None:
    p = sub.add_parser(
        "fidelity", help="replay traces through the charts and report fidelity",
        description="Compute per-round statistics from traces on Spark, replay them through "
                    "each query's chart with estimated statistics, and report how often the "
                    "chosen plan was the truly cheapest, against RAND, RATE and ORACLE-CHART, "
                    "with a k sweep, as report.md and report.html with figures.")
    p.add_argument("--catalog", type=options.input_file, required=True,
                   help="stream catalog (TOML)")
    p.add_argument("--workload", type=options.input_file, required=True,
                   help="workload (TOML) of named queries")
    p.add_argument("--charts", metavar="DIR",
                   help="chart set to replay (default: build the charts locally)")
    p.add_argument("--trace", action="append", metavar="STREAM=PATH",
                   help="a stream's trace: DEC-PKT text, CSV or Parquet (repeatable); an "
                        "alternative to --traces, e.g. for a stream --traces lacks")
    p.add_argument("--traces", metavar="DIR",
                   help="a directory of traces named STREAM.<ext> (from cqopt generate); "
                        "an alternative to one --trace per stream")
    p.add_argument("--ts-column", action="append", metavar="STREAM=COLUMN",
                   help="the timestamp column of a CSV or Parquet trace")
    p.add_argument("--out", required=True, metavar="REPORT", help="report directory")
    p.add_argument("--query", action="append", metavar="NAME",
                   help="replay only this query (repeatable; default: all with traces)")
    p.add_argument("--k", type=whole_number,
                   help="k of charts built here (default: the workload's); not with --charts")
    add_policy_arguments(p)
    p.add_argument("--k-sweep", default=DEFAULT_K_SWEEP, metavar="LIST",
                   help=f"k values to sweep, or none (default {DEFAULT_K_SWEEP})")
    p.add_argument("--rounds", type=number(integer=True, low=1),
                   help="replay only the first N rounds")
    p.add_argument("--seed", type=number(integer=True, low=0), default=0,
                   help="seed of the RAND baseline")
    p.add_argument("--master", type=options.master, default="local[*]",
                   help="Spark master URL (default local[*])")
    p.add_argument("--deadline", type=number(above=0), metavar="SECONDS",
                   help="each round must finish within SECONDS (default: each query's "
                        "deadline in the workload, if any): the chosen plans' seconds "
                        "predicted by the engine model (the catalog's [engine] constants), "
                        "each round shed at its inputs to fit, and reported beside the run "
                        "without shedding (misses, tuples shed, a COUNT's promised error)")
    p.add_argument("--min-kept", type=number(low=0, high=1), metavar="SHARE",
                   help="with --deadline: the least share of a round's input kept, its "
                        "least QoS (default: the query's min_kept in the workload, else 0)")
    p.add_argument("--delta", type=number(above=0, high=0.5),
                   help="with --deadline: a COUNT's error is promised at confidence "
                        f"1 - DELTA (default {DELTA:g}, Babcock et al.'s)")
    p.add_argument("--negotiate", action="store_true",
                   help="with --deadline: the queries also share each round's deadline on one "
                        "engine, one after another, and RTStream's inter-query negotiation "
                        "lowers their common QoS level (their input/quality tables) until "
                        "every one fits")
    p.add_argument("--memory-budget", type=options.byte_size, metavar="SIZE",
                   help="bytes the replayed queries may hold together, e.g. 100m: in rounds "
                        "that would exceed it, PIPES' resource manager shrinks every query's "
                        "window to the same fraction of its range, reported per round")
    p.add_argument("--window-min", type=number(above=0, high=1), metavar="SHARE",
                   help="with --memory-budget: the smallest window a query accepts, as a "
                        "share of its own (default 0.25)")
    p.add_argument("--force", action="store_true", help="replace an existing --out")
    p.add_argument("--quiet", action="store_true",
                   help="no progress on stderr (Spark's bar and each step)")
    p.add_argument("--json", action="store_true", help="print the table as JSON")
    p.set_defaults(run=cmd_fidelity)
