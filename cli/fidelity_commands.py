"""``cqopt generate`` and ``cqopt fidelity``: traces, and replaying them through charts."""

from __future__ import annotations

import argparse
import json
import math
import sys
import zlib
from pathlib import Path

from cqopt.catalog import load_catalog
from cqopt.charts.staging import staged_directory
from cqopt.cli.options import number
from cqopt.errors import CqoptError, parse_number
from cqopt.cli.policy_options import (
    add_policy_arguments,
    check_policy_options,
    describe_policy,
    policy_options,
)

DEFAULT_K_SWEEP = "2,5,10,20,40"
# A generated trace is held in memory as one frame per stream (about 40 bytes a tuple).
MAX_GENERATED_TUPLES = 5e7
MAX_ROUNDS = 1e7  # rounds of one replay: more means a timestamp is wrong
# Files --file-per-round writes per stream: a day of 1-second rounds is 86,400.
MAX_ROUND_FILES = 100_000


def _pairs(items: list[str] | None, option: str) -> dict[str, str]:
    out = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key or not value:
            raise CqoptError(f"{option} {item!r}: expected STREAM=VALUE")
        out[key] = value
    return out


def cmd_generate(args: argparse.Namespace) -> int:
    import numpy as np

    from cqopt.replay.trace_generate import generate_trace, interarrival_slice, \
        load_interarrivals
    from cqopt.replay.trace_write import write_trace, write_trace_per_round

    catalog = load_catalog(args.catalog)
    names = args.streams.split(",") if args.streams else list(catalog.streams)
    streams = []
    for name in names:
        stream = catalog.stream(name)
        if stream is None:
            raise CqoptError(f"--streams: the catalog has no stream {name!r}; it has "
                             + ", ".join(catalog.streams))
        streams.append(stream)
    if not (0 < args.duration < math.inf):
        raise CqoptError(f"--duration {args.duration}: needs a positive number of seconds")
    if not (0 <= args.rate_cv < math.inf):
        raise CqoptError(f"--rate-cv {args.rate_cv}: needs a number >= 0")
    try:
        gaps = load_interarrivals(args.interarrivals) if args.interarrivals else None
    except (EOFError, OSError, ValueError, zlib.error) as err:  # a truncated .gz, ...
        raise CqoptError(f"--interarrivals {args.interarrivals}: not a readable CSV file "
                         f"({type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''})"
                         ) from None
    scales: dict[str, float] = {}
    for stream_name, factor in _pairs(args.rate_scale, "--rate-scale").items():
        stream = catalog.stream(stream_name)
        try:
            value = parse_number(factor, "--rate-scale")
        except CqoptError:
            value = float("nan")
        if stream is None or not (value > 0 and np.isfinite(value)):
            raise CqoptError(f"--rate-scale {stream_name}={factor}: expected STREAM=FACTOR with "
                             "a stream of the catalog and a positive factor, e.g. TCP=2.5")
        scales[stream.name] = value
    if not (args.offset >= 0 and np.isfinite(args.offset)):
        raise CqoptError(f"--offset {args.offset}: needs a number of seconds >= 0")
    for stream in streams:  # before any allocation: 1e12 s would ask for a TiB
        rate = (sum(stream.rate) / 2 if gaps is None
                else 1.0 / max(float(np.mean(gaps)), np.finfo(float).tiny))
        expected = args.duration * rate * scales.get(stream.name, 1.0)
        if not expected <= MAX_GENERATED_TUPLES:
            raise CqoptError(f"--duration {args.duration:g}: {stream.name} would get about "
                             f"{expected:.3g} tuples ({rate:.3g}/s); at most "
                             f"{MAX_GENERATED_TUPLES:.0e} per stream: shorten --duration")
    steady: dict[str, dict[str, int]] = {}
    for item in args.steady or []:
        target, _, size = item.partition("=")
        stream_name, dot, column = target.partition(".")
        stream = catalog.stream(stream_name) if dot else None
        if stream is None or stream.column(column) is None:
            raise CqoptError(f"--steady {item!r}: expected STREAM.COLUMN[=DOMAIN] naming an "
                             "int column of the catalog, e.g. UDP.dest_host=1000")
        try:
            domain = parse_number(size, f"--steady {target}=", integer=True, low=1,
                                  high=2**62) if size else 1000
        except CqoptError as err:
            raise CqoptError(f"{err}: the domain is a whole number of values") from None
        steady.setdefault(stream.name, {})[stream.column(column).name] = domain
    if args.file_per_round is not None and not (args.file_per_round > 0
                                                and args.format != "dec"):
        raise CqoptError(f"--file-per-round {args.file_per_round}: needs a positive number of "
                         "seconds and --format parquet or csv")
    if args.file_per_round is not None and not (
            args.duration / args.file_per_round <= MAX_ROUND_FILES):
        raise CqoptError(f"--file-per-round {args.file_per_round:g} with --duration "
                         f"{args.duration:g}: about {args.duration / args.file_per_round:.3g} "
                         f"files per stream; at most {MAX_ROUND_FILES:,}: lengthen "
                         "--file-per-round or shorten --duration")
    frames = {}
    out = Path(args.out)
    with staged_directory(out, args.force, kind="trace set") as tmp:
        for i, stream in enumerate(streams):
            scale = scales.get(stream.name, 1.0)
            try:
                # Each stream replays its own stretch of the real arrivals (stream i
                # from --offset + i·--duration, cycled), at its own --rate-scale.
                own = None if gaps is None else interarrival_slice(
                    gaps, args.offset + i * args.duration, args.duration, scale)
                frame = generate_trace(stream, args.duration, seed=args.seed + i,
                                       rate_cv=args.rate_cv, interarrivals=own,
                                       steady=steady.get(stream.name),
                                       mean_rate=None if gaps is not None or stream.name
                                       not in scales else sum(stream.rate) / 2 * scale)
            except ValueError as err:
                raise CqoptError(f"cannot generate {stream.name}: {err}") from None
            if args.file_per_round:
                frames[stream.name] = frame
                continue
            path = write_trace(frame, tmp / f"{stream.name}.{args.format}")
            print(f"{stream.name}: {len(frame)} tuples over {args.duration:g} s -> "
                  f"{out / path.name}", file=sys.stderr)
        # One origin for every stream, so that file r of each stream is the same round.
        origin = min((float(f["ts"].min()) for f in frames.values() if len(f)), default=0.0)
        for name, frame in frames.items():
            parts = write_trace_per_round(frame, tmp / name, args.file_per_round,
                                          start=origin, fmt=args.format,
                                          rounds=math.ceil((args.duration - origin)
                                                           / args.file_per_round))
            print(f"{name}: {len(frame)} tuples over {args.duration:g} s -> {len(parts)} "
                  f"files of {args.file_per_round:g} s in {out / name}", file=sys.stderr)
    print(f"wrote {out}")
    return 0


def _trace_paths(args: argparse.Namespace, catalog) -> dict[str, str]:
    """Stream name (the catalog's spelling) -> trace path, from --trace and --traces.

    In ``--traces DIR`` a trace is ``STREAM.<ext>`` (ext: csv, parquet, pq or a
    DEC-PKT text suffix, optionally compressed, e.g. ``.csv.gz``), or a
    directory ``STREAM`` / ``STREAM.parquet`` of parts, where STREAM is a
    stream of the catalog, matched as the catalog matches stream names:
    whole, ignoring case (``TCP.backup.csv`` is no trace of TCP). Anything
    else is skipped and named; two traces for one stream are an error, and so
    is a --trace for a stream that --traces also holds.
    """
    paths: dict[str, str] = {}
    for stream, path in _pairs(args.trace, "--trace").items():
        paths[_stream_name(catalog, stream, "--trace")] = path
    if args.traces:
        from cqopt.replay.trace_format import trace_stem

        folder = Path(args.traces)
        if not folder.is_dir():
            raise CqoptError(f"--traces {folder}: no such directory")
        found: dict[str, list[Path]] = {}
        skipped = []
        for file in sorted(folder.iterdir()):
            if file.name.startswith("."):
                continue
            stem = trace_stem(file.name) if file.is_file() else (
                file.name if "." not in file.name else trace_stem(file.name))
            stream = catalog.stream(stem) if stem else None
            if stream is None or not (file.is_file() or file.is_dir()):
                skipped.append(file.name)
            else:
                found.setdefault(stream.name, []).append(file)
        for stream, files in found.items():
            if len(files) > 1:
                raise CqoptError(f"--traces {folder}: {len(files)} traces for stream {stream}: "
                                 f"{', '.join(f.name for f in files)}; keep one, or name it "
                                 f"with --trace {stream}=PATH")
            if stream in paths:
                raise CqoptError(f"--trace {stream}= and --traces {folder} both give a trace "
                                 f"of {stream} ({files[0].name}); they are alternatives")
            paths[stream] = str(files[0])
        if skipped:
            print(f"--traces {folder}: skipped {', '.join(skipped)} (not a trace named "
                  "STREAM.<csv|parquet|...> for a stream of the catalog)", file=sys.stderr)
    if not paths:
        raise CqoptError("no trace given: pass --trace STREAM=PATH (repeatable) or --traces DIR "
                         "(make one with cqopt generate)")
    for stream, path in paths.items():  # Spark would read /dev/zero or a FIFO forever
        if Path(path).exists() and not (Path(path).is_file() or Path(path).is_dir()):
            raise CqoptError(f"--trace {stream}={path}: not a regular file or folder (a FIFO "
                             "or device); a trace is a file or a folder of parts")
    return paths


def _check_span(query: str, infos: dict, window: float, rounds: int | None) -> None:
    """Refuse traces whose time span makes more rounds than anyone replays (a timestamp
    of 1e300 would make 1e300 rounds), before Spark is asked for them."""
    start = min(info.start for info in infos.values())
    end = max(info.end for info in infos.values())
    count = (end - start) / window
    if rounds is None and not count <= MAX_ROUNDS:
        last = max(infos, key=lambda s: infos[s].end)
        raise CqoptError(f"{query}: the traces span {end - start:.3g} s ({infos[last].path} "
                         f"ends at {end:.6g} s), {count:.3g} rounds of {window:g} s; at most "
                         f"{MAX_ROUNDS:.0e}: check the timestamps, or pass --rounds N")


def _stream_name(catalog, name: str, option: str) -> str:
    stream = catalog.stream(name)
    if stream is None:
        raise CqoptError(f"{option} {name}=...: the catalog has no stream {name!r}; it has "
                         + ", ".join(catalog.streams))
    return stream.name


def _window_seconds(query) -> float:
    if query.window is not None and query.window.seconds:
        return query.window.seconds
    ranges = [s.window.seconds for s in query.streams if s.window.kind == "range"]
    if not ranges:
        raise CqoptError("the query has no time window to cut rounds by: give it WINDOW [w] "
                         "or a [RANGE w] window")
    return max(ranges)


def cmd_fidelity(args: argparse.Namespace) -> int:
    import cqopt.charts as charts
    from cqopt.charts.spec import workload_specs
    from cqopt.charts.workload import load_workload
    from cqopt.replay.replay import k_sweep, local_chart, replay
    from cqopt.replay.report import headline, summary_json, write_report
    from cqopt.replay.rounds import write_round_statistics
    from cqopt.spark.round_stats import workload_round_statistics
    from cqopt.spark.session import running_session
    from cqopt.spark.trace_read import read_trace

    # Every option is checked before any Spark work starts.
    check_policy_options(args)
    for option, value, low in (("--k", args.k, 1), ("--rounds", args.rounds, 1)):
        if value is not None and not value >= low:
            raise CqoptError(f"{option} {value}: needs a number >= {low}")
    catalog = load_catalog(args.catalog)
    workload = load_workload(args.workload)
    ks = [] if args.k_sweep.lower() == "none" else _int_list(args.k_sweep, "--k-sweep")
    if args.charts and args.k is not None:
        raise CqoptError(f"--k {args.k} sets the k of charts built here, but --charts "
                         f"{args.charts} gives built charts; leave out one of them")
    paths = _trace_paths(args, catalog)
    times = {_stream_name(catalog, s, "--ts-column"): c
             for s, c in _pairs(args.ts_column, "--ts-column").items()}
    for stream in times:
        if stream not in paths:
            raise CqoptError(f"--ts-column {stream}=...: no trace of {stream} is given")
    specs = workload_specs(workload, catalog, {"k": args.k})
    if args.query:
        specs = [(s, q) for s, q in specs if s.name in args.query]
        missing = set(args.query) - {s.name for s, _ in specs}
        if missing:
            raise CqoptError(f"--query {', '.join(sorted(missing))}: not in {workload.source}")
    chosen = []
    for spec, query in specs:
        lacking = [s for s in query.stream_names if s not in paths]
        if lacking:
            print(f"skipping {spec.name}: no trace for {', '.join(lacking)}", file=sys.stderr)
        else:
            chosen.append((spec, query))
    if not chosen:
        raise CqoptError(f"no query of {workload.source} has a trace for all its streams; "
                         f"traces were given for {', '.join(paths)}")
    chart_set = charts.load(args.charts) if args.charts else None
    if chart_set is not None:
        fresh = chart_set.check(catalog)
        if fresh.stale:
            raise CqoptError(f"--charts {args.charts} is {fresh}")
        for spec, _ in chosen:
            stored = chart_set.charts.get(spec.name)
            if stored is not None and stored.spec.sql != spec.sql:
                raise CqoptError(f"--charts {args.charts}: its query {spec.name} is not the "
                                 f"one in {workload.source}; rebuild the charts with cqopt build")
    out = Path(args.out)
    with staged_directory(out, args.force, kind="report") as tmp:
        observed, frames, infos = {}, {}, {}
        with running_session(args.master, progress=not args.quiet) as spark:
            for name in dict.fromkeys(s for _, q in chosen for s in q.stream_names):
                print(f"{name}: reading {paths[name]}", file=sys.stderr)
                frames[name], infos[name] = read_trace(spark, paths[name], catalog.stream(name),
                                                       ts_column=times.get(name))
            (tmp / "rounds").mkdir()
            for spec, query in chosen:
                _check_span(spec.name, {s: infos[s] for s in query.stream_names},
                            _window_seconds(query), args.rounds)
            print(f"{', '.join(spec.name for spec, _ in chosen)}: per-round statistics on "
                  "Spark, one pass over each trace", file=sys.stderr)
            tables = workload_round_statistics(
                [query for _, query in chosen], frames,
                [_window_seconds(query) for _, query in chosen], rounds=args.rounds)
            for (spec, _), table in zip(chosen, tables):
                observed[spec.name] = table
                write_round_statistics(table, tmp / "rounds" / f"{spec.name}.parquet")
        replays, sweeps, used = {}, {}, {}
        options = {"seed": args.seed, **policy_options(args)}
        for spec, query in chosen:
            if chart_set is not None and spec.name in chart_set.charts:
                used[spec.name] = chart_set[spec.name]
            else:
                used[spec.name] = local_chart(spec, catalog)
            print(f"{spec.name}: replaying {len(observed[spec.name])} rounds", file=sys.stderr)
            replays[spec.name] = replay(spec.name, used[spec.name], catalog,
                                        observed[spec.name], **options)
            if ks:
                sweeps[spec.name] = k_sweep(spec.name, used[spec.name].spec, catalog,
                                            observed[spec.name], ks, **options)
        meta = {"catalog": args.catalog, "workload": args.workload,
                **{f"trace {s}": _describe(info) for s, info in infos.items()},
                "charts": args.charts or "built for this report", **describe_policy(args)}
        write_report(tmp, replays, used, sweeps, meta)
    if args.json:
        print(json.dumps(summary_json(replays), indent=2, ensure_ascii=False))
        return 0
    print(f"{'query':<10} {'method':<18} {'rounds':>6} {'fidelity':>8} {'regret':>8} "
          f"{'moves':>6} {'switches':>8}")
    for name, r in replays.items():
        s = r.summary
        print(f"{name:<10} {'chart':<18} {s['rounds']:6d} {s['fidelity']:8.3f} "
              f"{s['regret']:8.3f} {s['moves']:6d} {s['switches']:8d}")
        for base, b in s["baselines"].items():
            print(f"{'':<10} {base:<18} {s['rounds']:6d} {b['fidelity']:8.3f} "
                  f"{b['regret']:8.3f} {b.get('moves', ''):>6} {b.get('switches', ''):>8}")
        print(f"{'':<10} {headline(s)}")
        if s["undefined_rounds"]:
            print(f"{'':<10} ({s['undefined_rounds']} rounds without an optimal plan left out)")
    print(f"wrote {out / 'report.md'} and {out / 'report.html'}")
    return 0


def _describe(info) -> str:
    unparsed = ", ".join(f"{c}: {n}" for c, n in (info.unparsed or {}).items() if n)
    return (f"{info.path}: {info.rows} tuples over {info.end - info.start:.0f} s, "
            f"{info.out_of_order} out of order ({info.late} late)"
            + (f", unparsed values kept as missing ({unparsed})" if unparsed else ""))


def _int_list(text: str, option: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise CqoptError(f"{option} {text!r}: expected whole numbers like 2,5,10") from None
    if not values or min(values) < 1:
        raise CqoptError(f"{option} {text!r}: expected whole numbers >= 1")
    return values


def add_parsers(sub) -> None:
    p = sub.add_parser(
        "generate", help="generate seeded stream traces for the catalog's streams",
        description="Write one trace per stream: bursty arrivals (a Markov-modulated Poisson "
                    "process, or real inter-arrival times from a file) and Zipf-skewed values "
                    "whose mix drifts, so that rates and selectivities move.")
    p.add_argument("--catalog", required=True, help="stream catalog (TOML)")
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
    p.add_argument("--offset", type=number(low=0), default=0.0, metavar="SECONDS",
                   help="where in --interarrivals the first stream starts; stream i replays "
                        "the stretch from OFFSET + i * DURATION (default 0)")
    p.add_argument("--rate-scale", action="append", metavar="STREAM=FACTOR",
                   help="multiply a stream's arrival rate (repeatable; default 1)")
    p.add_argument("--steady", action="append", metavar="STREAM.COLUMN[=DOMAIN]",
                   help="an int column drawn uniformly from 1..DOMAIN (default 1000) with no "
                        "drift, e.g. join keys (repeatable)")
    p.add_argument("--format", choices=["parquet", "csv", "dec"], default="parquet",
                   help="trace file format (default parquet)")
    p.add_argument("--file-per-round", type=number(above=0), metavar="SECONDS",
                   help="write each stream as a directory OUT/STREAM of one file per SECONDS "
                        "of trace time (part-00000.parquet, ...), all streams from one origin, "
                        "for cqopt run's streaming file sources")
    p.add_argument("--force", action="store_true", help="replace an existing --out")
    p.set_defaults(run=cmd_generate)

    p = sub.add_parser(
        "fidelity", help="replay traces through the charts and report fidelity",
        description="Compute per-round statistics from traces on Spark, replay them through "
                    "each query's chart with estimated statistics, and report how often the "
                    "chosen plan was the truly cheapest, against RAND, RATE and ORACLE-CHART, "
                    "with a k sweep, as report.md and report.html with figures.")
    p.add_argument("--catalog", required=True, help="stream catalog (TOML)")
    p.add_argument("--workload", required=True, help="workload (TOML) of named queries")
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
    p.add_argument("--k", type=int, help="k of charts built here (default: the workload's); "
                                         "not with --charts")
    add_policy_arguments(p)
    p.add_argument("--k-sweep", default=DEFAULT_K_SWEEP, metavar="LIST",
                   help=f"k values to sweep, or none (default {DEFAULT_K_SWEEP})")
    p.add_argument("--rounds", type=number(integer=True, low=1),
                   help="replay only the first N rounds")
    p.add_argument("--seed", type=number(integer=True, low=0), default=0,
                   help="seed of the RAND baseline")
    p.add_argument("--master", default="local[*]", help="Spark master (default local[*])")
    p.add_argument("--force", action="store_true", help="replace an existing --out")
    p.add_argument("--quiet", action="store_true", help="no Spark progress bar")
    p.add_argument("--json", action="store_true", help="print the table as JSON")
    p.set_defaults(run=cmd_fidelity)
