"""``cqopt run``: one query of a workload, adaptively, on Spark Structured Streaming."""

from __future__ import annotations

import argparse
import sys

from cqopt.cli import options
from cqopt.cli.options import number, pairs
from cqopt.cli.policy_options import (
    add_policy_arguments,
    check_policy_options,
    policy_options,
)
from cqopt.errors import CqoptError, parse_number
from cqopt.runtime.estimators import DEFAULT_ESTIMATOR


def cmd_run(args: argparse.Namespace) -> int:
    from cqopt.api import run
    from cqopt.spark.run import RunSettings, Tolerance
    from cqopt.spark.run.settings import TRIGGERS

    # Everything is checked before Spark starts.
    check_policy_options(args)
    if args.trigger not in TRIGGERS:
        parse_number(args.trigger, "--trigger (once, available-now or seconds)", above=0)
    deadline = args.deadline  # seconds, or the trigger's interval
    if deadline is not None and deadline != "trigger":
        deadline = parse_number(deadline, "--deadline (SECONDS or trigger)", above=0)
    policy = policy_options(args)
    settings = RunSettings(trigger=args.trigger, shadow=args.shadow, max_rounds=args.max_rounds,
                           estimator=policy.pop("estimator"), d=policy.pop("d"),
                           decay=policy.pop("decay"), policy=policy,
                           tolerance=Tolerance(args.tolerance, args.tolerance_ms / 1000),
                           deadline=deadline, min_kept=args.min_kept)

    def say(line: str) -> None:
        if not args.quiet:
            print(f"cqopt run: {line}", file=sys.stderr, flush=True)

    result = run(args.catalog, args.workload, args.charts, args.query,
                 pairs(args.source, "--source"), args.out, settings=settings,
                 master=args.master, progress=False if args.quiet else say)
    _print_summary(args.query, result)
    s = result.summary
    changed = s.get("changed_files", [])
    if changed and not args.allow_late:
        raise CqoptError(f"{len(changed)} source file{'s' if len(changed) > 1 else ''} "
                         f"changed after Spark read {'them' if len(changed) > 1 else 'it'} "
                         f"(first: {changed[0]}), so some of their tuples were not run; see "
                         f"{result.out / 'report.md'}; write files whole before they land in "
                         "the source directory, or pass --allow-late to accept it")
    dropped = s.get("late_tuples", 0) + s.get("untimed_tuples", 0)
    if dropped and not args.allow_late:
        raise CqoptError(f"{dropped} tuples were not run ({s.get('late_tuples', 0)} late, of "
                         f"rounds that had already run; {s.get('untimed_tuples', 0)} without a "
                         f"time); see {result.out / 'report.md'}; pass --allow-late to accept "
                         "dropped tuples")
    return 0


def _print_summary(query: str, result) -> None:
    s = result.summary
    verdict = s.get("verdict") or {}
    if verdict.get("verdict"):  # measured seconds, or the engine model's prediction
        print(f"{query}: {verdict['verdict']['line']}")
    print(f"{query}: {s['rounds']} rounds ({s['empty_rounds']} empty), stopped by "
          f"{result.stopped_by}; {len(result.pending)} pending; switches {s['switches']}; "
          f"plans run: " + (", ".join(f"{p} x{n}" for p, n in s["plans_run"].items()) or "none"))
    if "model" in s:
        print(f"model fidelity {s['model']['fidelity']:.3f}")
    if "measured" in s:
        m, t = s["measured"], s["measured"]["total_seconds"]
        print(f"measured fidelity {m['fidelity']:.3f} (within {s['tolerance']}), measured "
              f"regret {m['regret']:.3f}; total s: adaptive {t['adaptive']:.3f}, best static "
              f"{t['best_static']:.3f} ({t['best_static_plan']}), worst static "
              f"{t['worst_static']:.3f} ({t['worst_static_plan']})")
    if "deadline" in s:
        d = s["deadline"]
        print(f"deadline {d['seconds']:g} s: {d['missed']} of {d['rounds']} rounds late; "
              f"{d['shed_rounds']} rounds shed {d['tuples_dropped']:,.0f} of {d['tuples']:,} "
              "tuples")
    print(f"wrote {result.out / 'report.md'}")


def add_parsers(sub) -> None:
    p = sub.add_parser(
        "run", help="run a query adaptively on Spark Structured Streaming",
        description="Read each stream of the query as a Structured Streaming source, cut the "
                    "tuples into rounds of the query's window in event time and, per complete "
                    "round, observe its statistics, choose a plan from the chart (OM's "
                    "Algorithm 2), run it on Spark and write its result under --out, with a "
                    "round log and a report. A killed run resumes where it stopped.")
    p.add_argument("--catalog", type=options.input_file, required=True,
                   help="stream catalog (TOML)")
    p.add_argument("--workload", type=options.input_file, required=True,
                   help="workload (TOML) of named queries")
    p.add_argument("--charts", required=True, metavar="DIR", help="chart set (cqopt build)")
    p.add_argument("--query", required=True, metavar="NAME", help="the query to run")
    p.add_argument("--source", action="append", metavar="STREAM=PATH",
                   help="a stream's source: a directory of .parquet or .csv files (cqopt "
                        "generate --file-per-round writes one), or rate:N for Spark's rate "
                        "source at N rows/s (repeatable)")
    p.add_argument("--out", required=True, metavar="DIR",
                   help="run folder: results, round log, report, checkpoint; rerun with the "
                        "same --out to resume")
    p.add_argument("--trigger", default="available-now", metavar="once|available-now|SECONDS",
                   help="Spark trigger (default available-now: every file there is in one "
                        "micro-batch, and the last round runs when the input ends)")
    p.add_argument("--shadow", action="store_true",
                   help="also run every other candidate plan on each round and time it")
    p.add_argument("--max-rounds", type=number(integer=True, low=1), metavar="N",
                   help="stop after N rounds")
    p.add_argument("--allow-late", action="store_true",
                   help="exit 0 even when tuples were dropped (late: their round had already "
                        "run; or without a time); they are counted in the report either way")
    p.add_argument("--tolerance", type=number(low=0), default=0.10,
                   help="relative noise tolerance of measured fidelity (default 0.10)")
    p.add_argument("--tolerance-ms", type=number(low=0), default=50.0,
                   help="absolute noise tolerance of measured fidelity in ms (default 50)")
    add_policy_arguments(p, estimator=DEFAULT_ESTIMATOR)
    p.add_argument("--deadline", metavar="SECONDS|trigger",
                   help="each round must finish within SECONDS (trigger: the --trigger "
                        "interval): a round the engine model predicts to overrun keeps only the "
                        "share of each stream's tuples that fits, sampled at the inputs, and "
                        "scales COUNT and SUM answers by 1/share; each round's log says what "
                        "was shed (default: no deadline, nothing shed)")
    p.add_argument("--min-kept", type=number(low=0, high=1), default=0.0, metavar="SHARE",
                   help="with --deadline: the least share of a round's input kept (default 0)")
    p.add_argument("--master", type=options.master, default="local[*]",
                   help="Spark master URL (default local[*])")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    p.set_defaults(run=cmd_run)
