"""``cqopt run``: a workload's queries (or one), adaptively, on Spark Structured Streaming."""

from __future__ import annotations

import argparse
import sys

from cqopt.cli import options
from cqopt.cli.options import number, pairs, with_parent
from cqopt.cli.policy_options import (
    add_policy_arguments,
    check_policy_options,
    policy_options,
)
from cqopt.errors import CqoptError, parse_number
from cqopt.runtime.estimators import DEFAULT_ESTIMATOR

MIN_TRIGGER_S = 0.001  # Spark counts a processing-time trigger in milliseconds
MAX_TRIGGER_S = 7 * 86400.0  # a round a week apart: beyond, Spark's interval overflows


def cmd_run(args: argparse.Namespace) -> int:
    from cqopt.api import run
    from cqopt.spark.run import RunSettings, Tolerance
    from cqopt.spark.run.settings import TRIGGERS

    # Everything is checked before Spark starts.
    check_policy_options(args)
    _check_sources_named_once(args.source or [])
    if args.trigger not in TRIGGERS:
        parse_number(args.trigger, "--trigger (once, available-now or seconds)",
                     low=MIN_TRIGGER_S, high=MAX_TRIGGER_S)
    deadline = args.deadline  # seconds, or the trigger's interval
    if deadline is not None and deadline != "trigger":
        deadline = parse_number(deadline, "--deadline (SECONDS or trigger)", above=0)
    min_kept = with_parent(args, "--min-kept", "--deadline", 0.0)
    policy = policy_options(args)
    settings = RunSettings(trigger=args.trigger, shadow=args.shadow, max_rounds=args.max_rounds,
                           estimator=policy.pop("estimator"), d=policy.pop("d"),
                           decay=policy.pop("decay"), policy=policy,
                           tolerance=Tolerance(args.tolerance, args.tolerance_ms / 1000),
                           deadline=deadline, min_kept=min_kept, refresh=args.refresh,
                           negotiate=args.negotiate, shared_shedding=args.shed_shared,
                           memory_budget=args.memory_budget,
                           window_min=with_parent(args, "--window-min", "--memory-budget", 0.25))

    def say(line: str) -> None:
        if not args.quiet:
            print(f"cqopt run: {line}", file=sys.stderr, flush=True)

    conf = pairs(args.conf, "--conf")
    sources = pairs(args.source, "--source")
    if args.query and len(args.query) == 1:
        result = run(args.catalog, args.workload, args.charts, args.query[0], sources,
                     args.out, settings=settings, master=args.master,
                     progress=False if args.quiet else say,
                     conf=conf, ui=args.ui)
        _print_summary(args.query[0], result)
        _check_dropped(result, args.allow_late)
        return 0
    from cqopt.api import run_workload

    done = run_workload(args.catalog, args.workload, args.charts, sources, args.out,
                        queries=args.query, settings=settings, master=args.master,
                        progress=False if args.quiet else say, conf=conf,
                        ui=args.ui)
    for name, result in done.results.items():
        _print_summary(name, result, report=False)
        if done.failures.get(name):
            print(f"{name}: failed on {done.failures[name]} micro-batches (see its log lines "
                  "and the report)")
    print(f"wrote {done.out / 'report.md'}")
    for result in done.results.values():
        _check_dropped(result, args.allow_late)
    if done.failures:
        raise CqoptError(f"{len(done.failures)} of {len(done.results)} queries failed on "
                         "a micro-batch (" + ", ".join(f"{n} x{k}" for n, k in
                                                       done.failures.items())
                         + f"); see {done.out / 'report.md'}")
    return 0


def _check_dropped(result, allow_late: bool) -> None:
    """Refuse a run that dropped tuples or lost lines of changed files, unless allowed."""
    s = result.summary
    changed = s.get("changed_files", [])
    if changed and not allow_late:
        raise CqoptError(f"{len(changed)} source file{'s' if len(changed) > 1 else ''} "
                         f"changed after Spark read {'them' if len(changed) > 1 else 'it'} "
                         f"(first: {changed[0]}), so some of their tuples were not run; see "
                         f"{result.out / 'report.md'}; write files whole before they land in "
                         "the source directory, or pass --allow-late to accept it")
    dropped = s.get("late_tuples", 0) + s.get("untimed_tuples", 0)
    if dropped and not allow_late:
        raise CqoptError(f"{dropped} tuples were not run ({s.get('late_tuples', 0)} late, of "
                         f"rounds that had already run; {s.get('untimed_tuples', 0)} without a "
                         f"time); see {result.out / 'report.md'}; pass --allow-late to accept "
                         "dropped tuples")


def _print_summary(query: str, result, report: bool = True) -> None:
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
    if report:
        print(f"wrote {result.out / 'report.md'}")


def _check_sources_named_once(items: list[str]) -> None:
    seen: dict[str, str] = {}
    for item in items:
        stream = item.partition("=")[0]
        if stream.lower() in seen:
            raise CqoptError(f"--source {item} and --source {seen[stream.lower()]}: one source "
                             f"per stream; give {stream} once")
        seen[stream.lower()] = item


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
    p.add_argument("--query", action="append", metavar="NAME",
                   help="a query to run (repeatable); default every query of the workload, "
                        "together in one streaming query, each under --out/NAME/ (one "
                        "--query: that query alone, its output in --out itself)")
    p.add_argument("--source", action="append", metavar="STREAM=SOURCE",
                   help="a stream's source: a directory of .parquet or .csv files (cqopt "
                        "generate --file-per-round writes one), rate:N for Spark's rate "
                        "source at N rows/s, or FORMAT:KEY=VALUE,... for any Structured "
                        "Streaming source (socket:host=localhost,port=9999; a text source's "
                        "lines are the stream's columns as CSV, time in seconds) (repeatable)")
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
    p.add_argument("--min-kept", type=number(low=0, high=1), metavar="SHARE",
                   help="with --deadline: the least share of a round's input kept (default 0)")
    p.add_argument("--negotiate", action="store_true",
                   help="with --deadline: per micro-batch, the rounds of every query share the "
                        "deadline; RTStream's negotiation lowers their common QoS level until "
                        "every one fits, and each query keeps that share of its input")
    p.add_argument("--shed-shared", action="store_true",
                   help="with --deadline: the workload's COUNT and SUM queries over one stream "
                        "are shed by Babcock, Datar and Motwani's shedders, placed on the "
                        "selections they share so that the largest relative error is least; "
                        "each round's log says what was placed (other queries shed at their "
                        "own inputs)")
    p.add_argument("--memory-budget", type=options.byte_size, metavar="SIZE",
                   help="bytes the queries' chosen plans may hold together, e.g. 100m: in "
                        "micro-batches that would exceed it, PIPES' resource manager shrinks "
                        "every window to the same fraction of its range, and a round runs on "
                        "its window's last part only (logged per round)")
    p.add_argument("--window-min", type=number(above=0, high=1), metavar="SHARE",
                   help="with --memory-budget: the smallest window a query accepts, as a "
                        "share of its own (default 0.25)")
    p.add_argument("--refresh", type=number(integer=True, low=1), metavar="ROUNDS",
                   help="rebuild the chart in the background from the run's own rounds (as "
                        "build --ranges-from does) once ROUNDS rounds have passed and more "
                        "than 10%% of them left the chart, and swap it in between rounds; a "
                        "failed rebuild is said once and the run goes on with its chart")
    p.add_argument("--master", type=options.master, default="local[*]",
                   help="Spark master URL (default local[*])")
    p.add_argument("--conf", action="append", metavar="KEY=VALUE",
                   help="a Spark setting, spark.KEY=VALUE (repeatable)")
    p.add_argument("--ui", action="store_true",
                   help="turn the Spark UI on (off by default); its address is said")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    p.set_defaults(run=cmd_run)
