"""``cqopt run``: one query of a workload, adaptively, on Spark Structured Streaming."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from cqopt.catalog import load_catalog
from cqopt.cli import options
from cqopt.cli.options import number, with_parent
from cqopt.cli.policy_options import (
    add_policy_arguments,
    check_policy_options,
    policy_options,
)
from cqopt.errors import CqoptError, parse_json, parse_number, read_text_file

MIN_TRIGGER_S = 0.001  # Spark counts a processing-time trigger in milliseconds
MAX_TRIGGER_S = 7 * 86400.0  # a round a week apart: beyond, Spark's interval overflows


def cmd_run(args: argparse.Namespace) -> int:
    import cqopt.charts as charts
    from cqopt.charts.spec import workload_specs
    from cqopt.charts.workload import load_workload
    from cqopt.cli.fidelity_commands import _pairs, _window_seconds
    from cqopt.spark.session import running_session
    from cqopt.spark.streaming import (
        TRIGGERS,
        AdaptiveRun,
        Source,
        Tolerance,
        parse_trigger,
    )

    # Everything is checked before Spark starts.
    check_policy_options(args)
    catalog = load_catalog(args.catalog)
    workload = load_workload(args.workload)
    specs = {spec.name: (spec, query) for spec, query in workload_specs(workload, catalog)}
    if args.query not in specs:
        raise CqoptError(f"--query {args.query}: not in {workload.source}; it has "
                         + ", ".join(specs))
    spec, query = specs[args.query]
    chart_set = charts.load(args.charts)
    fresh = chart_set.check(catalog)
    if fresh.stale:
        raise CqoptError(f"--charts {args.charts} was built from another catalog (fingerprint "
                         f"{fresh.built_with}) than --catalog {args.catalog} (fingerprint "
                         f"{fresh.catalog}); rebuild the charts with cqopt build --force")
    chart = chart_set[args.query]
    if chart.spec.sql != spec.sql:
        raise CqoptError(f"--charts {args.charts}: its query {args.query} is not the one in "
                         f"{workload.source}; rebuild the charts with cqopt build")
    given = _pairs(args.source, "--source")
    _check_sources_named_once(args.source or [])
    if not given:
        raise CqoptError("no --source given: pass --source STREAM=DIR (or STREAM=rate:N) for "
                         f"each stream of {args.query}: {', '.join(query.stream_names)}")
    sources = {}
    for stream, text in given.items():
        if stream.lower() not in {s.lower() for s in query.stream_names}:
            raise CqoptError(f"--source {stream}={text}: query {args.query} reads no stream "
                             f"{stream}; its streams are {', '.join(query.stream_names)}")
        if text.startswith("rate:"):  # rows/s as the command line reads numbers
            parse_number(text[5:], f"--source {stream}=rate:", integer=True, low=1)
        sources[stream] = Source.parse(stream, text)
    missing = [s for s in query.stream_names if s.lower() not in {g.lower() for g in given}]
    if missing:
        raise CqoptError(f"no --source for stream{'s' if len(missing) > 1 else ''} "
                         f"{', '.join(missing)} of query {args.query}; pass --source "
                         f"{missing[0]}=DIR (or {missing[0]}=rate:N)")
    check_run_folder(Path(args.out))
    if args.trigger not in TRIGGERS:
        parse_number(args.trigger, "--trigger (once, available-now or seconds)",
                     low=MIN_TRIGGER_S, high=MAX_TRIGGER_S)
    check_source_files(sources.values(), catalog, args.trigger not in TRIGGERS)
    tolerance = Tolerance(args.tolerance, args.tolerance_ms / 1000)

    def say(line: str) -> None:
        if not args.quiet:
            print(f"cqopt run: {line}", file=sys.stderr, flush=True)

    trigger = parse_trigger(args.trigger)
    deadline = None
    if args.deadline is not None:  # seconds, or the trigger's interval
        if args.deadline == "trigger":
            if not isinstance(trigger, float):
                raise CqoptError(f"--deadline trigger: the deadline is the trigger's interval, "
                                 f"but --trigger is {args.trigger}; give --trigger SECONDS or "
                                 "--deadline SECONDS")
            deadline = trigger
        else:
            deadline = parse_number(args.deadline, "--deadline (SECONDS or trigger)", above=0)
    min_kept = with_parent(args, "--min-kept", "--deadline", 0.0)
    with running_session(args.master, progress=say) as spark:
        run = AdaptiveRun(spark, args.query, query, chart, catalog, sources, args.out,
                          window_s=_window_seconds(query), trigger=trigger, shadow=args.shadow,
                          max_rounds=args.max_rounds, policy=policy_options(args),
                          tolerance=tolerance, deadline=deadline, min_kept=min_kept,
                          progress=say)
        result = run.run()
    s = result.summary
    print(f"{args.query}: {s['rounds']} rounds ({s['empty_rounds']} empty), stopped by "
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
    dropped = s.get("late_tuples", 0) + s.get("untimed_tuples", 0)
    if dropped and not args.allow_late:
        raise CqoptError(f"{dropped} tuples were not run ({s.get('late_tuples', 0)} late, of "
                         f"rounds that had already run; {s.get('untimed_tuples', 0)} without a "
                         f"time); see {result.out / 'report.md'}; pass --allow-late to accept "
                         "dropped tuples")
    return 0


def check_run_folder(out: Path) -> None:
    """Refuse an ``--out`` that is no run folder cqopt wrote, before Spark starts.

    A new or empty folder starts a run and a folder with a run's ``state.json``
    (a JSON table) resumes it; anything else (a file, a user's folder) is left alone.
    """
    if out.exists() and not out.is_dir():
        raise CqoptError(f"--out {out}: is a file, not a directory; pick a new --out")
    if out.is_dir() and not (out / "state.json").is_file() and any(out.iterdir()):
        raise CqoptError(f"--out {out}: exists and is not a cqopt run folder (no state.json); "
                         "cqopt leaves it alone: pick a new --out")
    if (out / "state.json").is_file():
        try:
            state = parse_json(read_text_file(out / "state.json"), nan=True)
        except (OSError, ValueError) as err:
            state = err
        if not isinstance(state, dict):
            raise CqoptError(f"--out {out}: its state.json is no run's state ("
                             f"{state if isinstance(state, Exception) else 'not a table'}); "
                             "the folder was edited: resume from a copy, or pick a new --out")


def _check_sources_named_once(items: list[str]) -> None:
    seen: dict[str, str] = {}
    for item in items:
        stream = item.partition("=")[0]
        if stream.lower() in seen:
            raise CqoptError(f"--source {item} and --source {seen[stream.lower()]}: one source "
                             f"per stream; give {stream} once")
        seen[stream.lower()] = item


def check_source_files(sources, catalog, timed_trigger: bool) -> None:
    """Each source's files whole and of its stream's layout, and a rate source under a
    trigger that ends its rounds, before Spark starts (Spark would fail on them later)."""
    from cqopt.replay.trace_format import TraceError, check_trace_files
    from cqopt.spark.streaming import _TIME_NAMES, _check_layouts, _file_columns

    for source in sources:
        where = f"--source {source.stream}={source.path or f'rate:{source.rows_per_second}'}"
        if source.kind == "rate":
            if not timed_trigger:
                raise CqoptError(f"{where}: a rate source never ends, so once or "
                                 "available-now never closes a round; give --trigger SECONDS "
                                 "(and --max-rounds N to stop)")
            continue
        try:
            check_trace_files(source.path)
        except TraceError as err:
            raise CqoptError(f"{where}: {err}; move the file out of the directory (or "
                             "repair it)") from None
        stream = catalog.stream(source.stream)
        times = [c.name for c in stream.columns if c.type == "timestamp"][:1]
        _check_layouts(source, _file_columns(source), [c.name for c in stream.columns],
                       [*times, *_TIME_NAMES])


def add_parsers(sub) -> None:
    p = sub.add_parser(
        "run", help="run a query adaptively on Spark Structured Streaming",
        description="Read each stream of the query as a Structured Streaming source, cut the "
                    "tuples into rounds of the query's window in event time and, per complete "
                    "round, observe its statistics, choose a plan from the chart (OM's "
                    "Algorithm 2), run it on Spark and write its result under --out, with a "
                    "round log and a report. A killed run resumes where it stopped.")
    p.add_argument("--catalog", required=True, help="stream catalog (TOML)")
    p.add_argument("--workload", required=True, help="workload (TOML) of named queries")
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
    add_policy_arguments(p, estimator="sample")
    p.add_argument("--deadline", metavar="SECONDS|trigger",
                   help="each round must finish within SECONDS (trigger: the --trigger "
                        "interval): a round the engine model predicts to overrun keeps only the "
                        "share of each stream's tuples that fits, sampled at the inputs, and "
                        "scales COUNT and SUM answers by 1/share; each round's log says what "
                        "was shed (default: no deadline, nothing shed)")
    p.add_argument("--min-kept", type=number(low=0, high=1), metavar="SHARE",
                   help="with --deadline: the least share of a round's input kept (default 0)")
    p.add_argument("--master", type=options.master, default="local[*]",
                   help="Spark master URL (default local[*])")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    p.set_defaults(run=cmd_run)
