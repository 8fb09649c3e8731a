"""cqopt's pipelines as Python functions: what the ``cqopt`` commands run, without a shell.

:func:`build` builds a workload's plan charts (in this process or on Spark)
and writes them as a chart set; :func:`generate` writes seeded stream traces;
:func:`fidelity` replays traces through charts into a report; :func:`run` runs
one query adaptively on Spark Structured Streaming. The command
line parses its options and calls these; each checks everything it is given
before any work, and raises a :class:`~cqopt.errors.CqoptError` that says
what was wrong. ``cqopt.build``, ``cqopt.generate``, ``cqopt.fidelity`` and
``cqopt.run`` are these functions.

A message names a parameter as Python spells it (``k = 0``); the command
line passes ``name=`` so that its messages name the option (``--k 0``).
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cqopt.catalog import Catalog, load_catalog
from cqopt.charts.overload_settings import OverloadSettings
from cqopt.charts.settings import judge_options, judge_settings, setting_label
from cqopt.charts.workload import Workload, load_workload, qos
from cqopt.errors import CqoptError, parse_number
from cqopt.progress import say as step

if TYPE_CHECKING:
    import pandas as pd

    from cqopt.charts.kernel import Chart
    from cqopt.spark.run import RunResult, RunSettings
    from cqopt.spark.run.workload import WorkloadResult

PathLike = str | os.PathLike
Name = Callable[[str, Any], str]  # how a message names a parameter and its value
# A generated trace is held in memory as one frame per stream (about 40 bytes a tuple).
MAX_GENERATED_TUPLES = 5e7
# Files a per-round trace writes per stream: a day of 1-second rounds is 86,400.
MAX_ROUND_FILES = 100_000


def _catalog(catalog: PathLike | Catalog) -> Catalog:
    return catalog if isinstance(catalog, Catalog) else load_catalog(catalog)


def _workload(workload: PathLike | Workload) -> Workload:
    return workload if isinstance(workload, Workload) else load_workload(workload)


def build(catalog: PathLike | Catalog, workload: PathLike | Workload,
          out: PathLike | None = None, *, engine: str = "local", k: int | None = None,
          model: str | None = None, weights: tuple[float, ...] | None = None,
          refine: int | None = None, depth: int | None = None, reduce: float | None = None,
          ranges_from: PathLike | None = None, percentiles: tuple[float, float] = (5.0, 95.0),
          master: str = "local[*]", force: bool = False, progress: bool = True,
          name: Name = setting_label) -> list[Chart]:
    """Build the plan charts of every query of a workload, and write them as a chart set.

    Parameters
    ----------
    catalog : path or Catalog
        The stream catalog (TOML), or one loaded.
    workload : path or Workload
        The workload (TOML) of named queries and their chart settings, or one loaded.
    out : path, optional
        The chart set directory to write (:func:`cqopt.load` reads it); without
        it the charts are returned only.
    engine : {"local", "spark", "auto"}
        Cost the cells in this process or on Spark (``master``); ``auto`` picks
        Spark for a cluster master, else by the charts' size
        (:func:`cqopt.charts.build.pick_engine`), and says which.
    k, model, weights
        Override the workload's k, cost model and utility weights for every query.
    refine, depth : int, optional
        Refined charts of at most ``refine`` regions (to ``depth``) instead of grids.
    reduce : float, optional
        Anorexic reduction at this cost-increase threshold in [0, 1).
    ranges_from : path, optional
        A folder of the streams' traces (``STREAM.<ext>``, their per-round
        statistics computed on Spark on ``master``), or of per-round statistics
        tables, one ``QUERY.parquet`` per query (what ``cqopt fidelity`` writes
        to ``REPORT/rounds``): each query's axes span the ``percentiles`` of
        what was observed, instead of the workload's ranges. Every range set is
        said on stderr.
    percentiles : (float, float)
        The lower and upper percentile of ``ranges_from``.
    master : str
        With ``engine="spark"``: a running session of this process, else a new one
        on this master URL.
    force : bool
        Replace an existing ``out`` that cqopt wrote.
    progress : bool
        Say each step and the work counted on stderr, in the console's words (default);
        False says nothing, as ``--quiet`` does.
    name : callable
        ``name(parameter, value)`` names a parameter in messages.

    Returns
    -------
    list of Chart
        One per query, in the workload's order.

    Raises
    ------
    CqoptError
        A bad file, query or setting (before any work), or a failed Spark job.

    Examples
    --------
    >>> import cqopt, tempfile
    >>> from cqopt.examples import example
    >>> out = tempfile.mkdtemp() + "/charts"
    >>> built = cqopt.build(example("dec-pkt.toml"), example("workload.toml"), out, k=4)
    >>> [(c.spec.name, c.plan_index.shape) for c in built]
    [('Q1', (4, 4)), ('Q2', (4, 4, 4))]
    >>> cqopt.load(out).choose("Q1", {"sel.TCP": 0.1, "rate.TCP": 450.0}).plan_id
    'TCP[σπ]'
    """
    from cqopt.charts.build import build_local
    from cqopt.charts.refine import check_refinement
    from cqopt.charts.spec import workload_specs
    from cqopt.charts.store import check_writable, write_chart_set

    if engine not in ("auto", "local", "spark"):
        raise CqoptError(f"{name('engine', engine)}: expected auto, local or spark")
    if out is not None:
        check_writable(Path(out), force, kind="chart set")  # before any work
    given = {"k": k, "model": model, "weights": weights, "refine": refine, "depth": depth,
             "reduce": reduce}
    options = judge_options(given, name, CqoptError)
    catalog = _catalog(catalog)
    workload = _workload(workload)
    labels = {key: name(key, value) for key, value in given.items() if value is not None}
    if ranges_from is not None:
        workload = _ranged(workload, catalog, workload_specs(workload, catalog, options, labels),
                           Path(ranges_from), percentiles, name, master, progress)
    specs = [spec for spec, _ in workload_specs(workload, catalog, options, labels)]
    shape = {key: options.get(key) for key in ("refine", "depth", "reduce")}
    if shape["refine"] is not None:  # every bad budget or depth before Spark starts
        for spec in specs:
            check_refinement(spec, shape["refine"], shape["depth"])
    extra: dict[str, Any] = {}
    if engine == "auto":  # by the charts' size, and said
        from cqopt.charts.build import pick_engine

        if not master.startswith("local"):  # a cluster named: the user means Spark
            engine, why = "spark", f"on Spark: the master {master} is a cluster"
        else:
            engine, why = pick_engine(specs, catalog, shape["refine"])
        step(f"building {why}", enabled=progress)
    if engine == "local":
        charts = build_local(specs, catalog, progress=progress, **shape)
    else:
        from cqopt.spark.chart_build import build_spark
        from cqopt.spark.session import running_session

        with running_session(master, progress=progress) as spark:
            charts = build_spark(specs, catalog, spark=spark, progress=progress, **shape)
            extra["master"] = spark.sparkContext.master
    if out is not None:
        write_chart_set(Path(out), charts, catalog, force=force, engine=engine, extra=extra)
    return charts


def _ranged(workload: Workload, catalog: Catalog, specs, folder: Path,
            percentiles: tuple[float, float], name: Name, master: str,
            progress: bool) -> Workload:
    """``workload`` with each query's axes spanning the observed percentiles (said).

    ``folder`` holds per-round statistics tables (``QUERY.parquet``, what
    ``cqopt fidelity`` writes to ``REPORT/rounds``) or, holding none, the
    streams' traces (``STREAM.<ext>``), whose per-round statistics are then
    computed on Spark as ``cqopt fidelity`` computes them.
    """
    import dataclasses

    from cqopt.charts.ranges import observed_ranges
    from cqopt.replay.rounds import read_round_statistics

    where = name("ranges_from", folder)
    if not folder.is_dir():
        raise CqoptError(f"{where}: not a folder; give a folder of traces (STREAM.csv, "
                         "STREAM.parquet, ...) or the rounds folder cqopt fidelity wrote "
                         "(REPORT/rounds, one QUERY.parquet per query)")
    lo, hi = percentiles
    if not 0 <= lo < hi <= 100:
        raise CqoptError(f"{name('percentiles', f'{lo:g},{hi:g}')}: needs 0 <= LO < HI <= 100")
    tables = {spec.name: folder / f"{spec.name}.parquet" for spec, _ in specs
              if (folder / f"{spec.name}.parquet").exists()}
    if not tables:  # no rounds tables: the folder's traces
        paths = trace_paths(catalog, None, folder, lambda _, value: where)
        chosen = [(spec, query) for spec, query in specs
                  if all(s in paths for s in query.stream_names)]
        if not chosen:
            raise CqoptError(f"{where}: holds neither a rounds table of a query "
                             f"({', '.join(f'{spec.name}.parquet' for spec, _ in specs)}) nor "
                             f"traces of all the streams of one (it has traces of "
                             f"{', '.join(paths) or 'no stream'})")
        computed, _ = _trace_statistics(chosen, catalog, paths, {}, None, master, progress,
                                        name)
    found = {}
    for spec, _ in specs:
        path = tables.get(spec.name)
        if tables and path is None:
            print(f"{spec.name}: no {spec.name}.parquet in {folder}; its ranges stay the "
                  "workload's", file=sys.stderr)
            continue
        if not tables and spec.name not in computed:
            print(f"{spec.name}: {folder} lacks a trace of one of its streams; its ranges "
                  "stay the workload's", file=sys.stderr)
            continue
        table = read_round_statistics(path) if tables else computed[spec.name]
        source = path if tables else f"the traces in {folder}"
        ranges = observed_ranges(spec, {c: table[c] for c in table.columns}, (lo, hi))
        for stat, (a, b, rounds) in ranges.items():
            axis = next(x for x in spec.axes if x.statistic == stat)
            print(f"{spec.name}: {stat} from {a:.4g} to {b:.4g}, the {lo:g}th to {hi:g}th "
                  f"percentiles of {rounds} rounds in {source} (the workload's: {axis.lo:.4g} "
                  f"to {axis.hi:.4g})", file=sys.stderr)
        found[spec.name] = {s: [a, b] for s, (a, b, _) in ranges.items()}
    queries = tuple(dataclasses.replace(q, options={**q.options, "ranges": {
        **q.options.get("ranges", {}), **found[q.name]}}) if q.name in found else q
        for q in workload.queries)
    return dataclasses.replace(workload, queries=queries)


def generate(catalog: PathLike | Catalog, out: PathLike, *, streams: list[str] | None = None,
             duration: float = 600.0, seed: int = 0, rate_cv: float = 0.25,
             interarrivals: PathLike | None = None, offset: float = 0.0,
             rate_scale: Mapping[str, float | str] | None = None,
             steady: list[str] | None = None, format: str = "parquet",
             file_per_round: float | None = None, force: bool = False,
             progress: bool = True, name: Name = setting_label) -> Path:
    """Write one seeded trace per stream: bursty arrivals, drifting Zipf-skewed values.

    Parameters
    ----------
    catalog : path or Catalog
    out : path
        The directory of traces to write (``STREAM.parquet``, ...).
    streams : list of str, optional
        The streams to generate (default: every stream of the catalog).
    duration : float
        Seconds of trace.
    seed : int
        Stream i is drawn with seed ``seed + i``.
    rate_cv : float
        Coefficient of variation of the arrival rate (a Markov-modulated Poisson process).
    interarrivals : path, optional
        Real inter-arrival times (a CSV) to replay instead; stream i replays the
        stretch from ``offset + i * duration``.
    offset : float
        Where in ``interarrivals`` the first stream starts, in seconds.
    rate_scale : mapping of str to float, optional
        Stream name to a factor on its arrival rate.
    steady : list of str, optional
        ``"STREAM.COLUMN[=DOMAIN]"``: an int column drawn uniformly from 1..DOMAIN
        (default 1000) with no drift, e.g. join keys.
    format : str
        A registered trace format (:func:`cqopt.replay.trace_format.trace_formats`):
        ``parquet``, ``csv``, ``dec``, ...
    file_per_round : float, optional
        Write each stream as a directory of one file per this many seconds.
    force : bool
        Replace an existing ``out`` that cqopt wrote.
    progress : bool
        A line per stream on stderr, as the console says it (default); False says nothing.
    name : callable
        ``name(parameter, value)`` names a parameter in messages.

    Returns
    -------
    Path
        ``out``.

    Raises
    ------
    CqoptError
        An unknown stream or column, a bad number, an unreadable ``interarrivals``
        or a trace too large to hold, before anything is written.

    Examples
    --------
    >>> import cqopt, tempfile
    >>> from cqopt.examples import example
    >>> out = cqopt.generate(example("dec-pkt.toml"), tempfile.mkdtemp() + "/traces",
    ...                      streams=["TCP"], duration=5)
    >>> sorted(p.name for p in out.glob("*.parquet"))
    ['TCP.parquet']
    """
    import math
    import zlib

    import numpy as np

    from cqopt.output import staged_directory
    from cqopt.replay.trace_format import get_trace_format, streamed_formats
    from cqopt.replay.trace_generate import generate_trace, interarrival_slice, \
        load_interarrivals
    from cqopt.replay.trace_write import write_trace, write_trace_per_round

    catalog = _catalog(catalog)
    chosen = []
    if streams is not None and (not streams or any(not s.strip() for s in streams)):
        raise CqoptError(f"{name('streams', ','.join(streams))}: names an empty stream; give "
                         "streams of the catalog, e.g. " + ",".join(catalog.streams))
    for stream_name in list(catalog.streams) if streams is None else streams:
        stream = catalog.stream(stream_name)
        if stream is not None and stream.name in [c.name for c in chosen]:
            raise CqoptError(f"{name('streams', ','.join(streams or []))}: names "
                             f"{stream.name} twice; give each stream once")
        if stream is None:
            raise CqoptError(f"{name('streams', ','.join(streams or []))}: the catalog has no "
                             f"stream {stream_name!r}; it has " + ", ".join(catalog.streams))
        chosen.append(stream)
    if not (0 < duration < math.inf):
        raise CqoptError(f"{name('duration', duration)}: needs a positive number of seconds")
    if not (0 <= rate_cv < math.inf):
        raise CqoptError(f"{name('rate_cv', rate_cv)}: needs a number >= 0")
    try:
        gaps = load_interarrivals(interarrivals) if interarrivals else None
    except (EOFError, OSError, ValueError, zlib.error) as err:  # a truncated .gz, ...
        raise CqoptError(f"{name('interarrivals', interarrivals)}: not a readable CSV file "
                         f"({type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''})"
                         ) from None
    scales: dict[str, float] = {}
    for stream_name, factor in (rate_scale or {}).items():
        stream = catalog.stream(stream_name)
        try:
            value = parse_number(str(factor), name("rate_scale", stream_name))
        except CqoptError:
            value = float("nan")
        if stream is None or not (value > 0 and np.isfinite(value)):
            raise CqoptError(f"{name('rate_scale', f'{stream_name}={factor}')}: expected "
                             "STREAM=FACTOR with a stream of the catalog and a positive "
                             "factor, e.g. TCP=2.5")
        scales[stream.name] = value
    if not (offset >= 0 and np.isfinite(offset)):
        raise CqoptError(f"{name('offset', offset)}: needs a number of seconds >= 0")
    for stream in chosen:  # before any allocation: 1e12 s would ask for a TiB
        rate = (sum(stream.rate) / 2 if gaps is None
                else 1.0 / max(float(np.mean(gaps)), np.finfo(float).tiny))
        expected = duration * rate * scales.get(stream.name, 1.0)
        if not expected >= 1:
            raise CqoptError(f"{name('duration', f'{duration:g}')}: {stream.name} would get "
                             f"about {expected:.3g} tuples ({rate * scales.get(stream.name, 1.0):.3g}"
                             "/s): not one; lengthen the duration or raise the rate scale")
        if not expected <= MAX_GENERATED_TUPLES:
            raise CqoptError(f"{name('duration', f'{duration:g}')}: {stream.name} would get "
                             f"about {expected:.3g} tuples ({rate:.3g}/s); at most "
                             f"{MAX_GENERATED_TUPLES:.0e} per stream: shorten the duration")
    uniform: dict[str, dict[str, int]] = {}
    for item in steady or []:
        target, _, size = item.partition("=")
        stream_name, dot, column = target.partition(".")
        stream = catalog.stream(stream_name) if dot else None
        if stream is None or stream.column(column) is None:
            raise CqoptError(f"{name('steady', repr(item))}: expected STREAM.COLUMN[=DOMAIN] "
                             "naming an int column of the catalog, e.g. UDP.dest_host=1000")
        try:
            domain = parse_number(size, name("steady", f"{target}="), integer=True, low=1,
                                  high=2**62) if size else 1000
        except CqoptError as err:
            raise CqoptError(f"{err}: the domain is a whole number of values") from None
        uniform.setdefault(stream.name, {})[stream.column(column).name] = domain
    written = get_trace_format(format, name("format", format))
    if file_per_round is not None and not (file_per_round > 0 and written.stream is not None):
        raise CqoptError(f"{name('file_per_round', file_per_round)}: needs a positive number "
                         f"of seconds and a format cqopt run streams: "
                         f"{' or '.join(streamed_formats())}")
    if file_per_round is not None and not duration / file_per_round <= MAX_ROUND_FILES:
        raise CqoptError(f"{name('file_per_round', f'{file_per_round:g}')} with "
                         f"{name('duration', f'{duration:g}')}: about "
                         f"{duration / file_per_round:.3g} files per stream; at most "
                         f"{MAX_ROUND_FILES:,}: write longer rounds or a shorter trace")
    frames = {}
    out = Path(out)
    with staged_directory(out, force, kind="trace set") as tmp:
        for i, stream in enumerate(chosen):
            scale = scales.get(stream.name, 1.0)
            try:
                # Each stream replays its own stretch of the real arrivals (stream i
                # from offset + i·duration, cycled), at its own rate scale.
                own = None if gaps is None else interarrival_slice(
                    gaps, offset + i * duration, duration, scale)
                frame = generate_trace(stream, duration, seed=seed + i, rate_cv=rate_cv,
                                       interarrivals=own, steady=uniform.get(stream.name),
                                       mean_rate=None if gaps is not None or stream.name
                                       not in scales else sum(stream.rate) / 2 * scale)
            except ValueError as err:
                raise CqoptError(f"cannot generate {stream.name}: {err}") from None
            if file_per_round:
                frames[stream.name] = frame
                continue
            path = write_trace(frame, tmp / f"{stream.name}{written.suffixes[0]}", format)
            step(f"{stream.name}: {len(frame)} tuples over {duration:g} s -> "
                 f"{out / path.name}", enabled=progress)
        # One origin for every stream, so that file r of each stream is the same round.
        origin = min((float(f["ts"].min()) for f in frames.values() if len(f)), default=0.0)
        for stream_name, frame in frames.items():
            parts = write_trace_per_round(frame, tmp / stream_name, file_per_round,
                                          start=origin, fmt=format,
                                          rounds=math.ceil((duration - origin)
                                                           / file_per_round))
            step(f"{stream_name}: {len(frame)} tuples over {duration:g} s -> "
                f"{len(parts)} files of {file_per_round:g} s in {out / stream_name}",
                enabled=progress)
    return out


DEFAULT_K_SWEEP = (2, 5, 10, 20, 40)
MAX_ROUNDS = 1e7  # rounds of one replay: more means a timestamp is wrong


def trace_paths(catalog: Catalog, traces: Mapping[str, PathLike] | None = None,
                trace_dir: PathLike | None = None, name: Name = setting_label
                ) -> dict[str, str]:
    """Stream name (the catalog's spelling) -> trace path, from ``traces`` and ``trace_dir``.

    In ``trace_dir`` a trace is ``STREAM.<ext>`` (ext: csv, parquet, pq or a
    DEC-PKT text suffix, optionally compressed, e.g. ``.csv.gz``), or a
    directory ``STREAM`` / ``STREAM.parquet`` of parts, where STREAM is a
    stream of the catalog, matched as the catalog matches stream names:
    whole, ignoring case (``TCP.backup.csv`` is no trace of TCP). Anything
    else is skipped and named on stderr; two traces for one stream are an
    error, and so is a trace in ``traces`` for a stream ``trace_dir`` also holds.

    Raises
    ------
    CqoptError
        A stream the catalog lacks, a missing directory, two traces of a stream, or none.
    """
    paths: dict[str, str] = {}
    for stream, path in (traces or {}).items():
        paths[_stream_name(catalog, stream, name("trace", f"{stream}=..."))] = str(path)
    if trace_dir is not None:
        from cqopt.replay.trace_format import trace_stem

        folder = Path(trace_dir)
        if not folder.is_dir():
            raise CqoptError(f"{name('traces', folder)}: no such directory")
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
                raise CqoptError(f"{name('traces', folder)}: {len(files)} traces for stream "
                                 f"{stream}: {', '.join(f.name for f in files)}; keep one, or "
                                 f"name it with {name('trace', f'{stream}=PATH')}")
            if stream in paths:
                raise CqoptError(f"{name('trace', f'{stream}=')} and {name('traces', folder)} "
                                 f"both give a trace of {stream} ({files[0].name}); they are "
                                 "alternatives")
            paths[stream] = str(files[0])
        if skipped:
            print(f"{name('traces', folder)}: skipped {', '.join(skipped)} (not a trace named "
                  "STREAM.<csv|parquet|...> for a stream of the catalog)", file=sys.stderr)
    if not paths:
        raise CqoptError(f"no trace given: pass {name('trace', 'STREAM=PATH')} (repeatable) or "
                         f"{name('traces', 'DIR')} (make one with cqopt generate)")
    for stream, path in paths.items():  # Spark would read /dev/zero or a FIFO forever
        if Path(path).exists() and not (Path(path).is_file() or Path(path).is_dir()):
            raise CqoptError(f"{name('trace', f'{stream}={path}')}: not a regular file or "
                             "folder (a FIFO or device); a trace is a file or a folder of parts")
    return paths


def check_span(query: str, infos: dict, window: float, rounds: int | None,
               name: Name = setting_label) -> None:
    """Refuse traces whose time span makes more rounds than anyone replays (a timestamp
    of 1e300 would make 1e300 rounds), before Spark is asked for them."""
    start = min(info.start for info in infos.values())
    end = max(info.end for info in infos.values())
    count = (end - start) / window
    if rounds is None and not count <= MAX_ROUNDS:
        last = max(infos, key=lambda s: infos[s].end)
        raise CqoptError(f"{query}: the traces span {end - start:.3g} s ({infos[last].path} "
                         f"ends at {end:.6g} s), {count:.3g} rounds of {window:g} s; at most "
                         f"{MAX_ROUNDS:.0e}: check the timestamps, or pass "
                         f"{name('rounds', 'N')}")


def _stream_name(catalog: Catalog, stream: str, given: str) -> str:
    found = catalog.stream(stream)
    if found is None:
        raise CqoptError(f"{given}: the catalog has no stream {stream!r}; it has "
                         + ", ".join(catalog.streams))
    return found.name


def _describe(info) -> str:
    unparsed = ", ".join(f"{c}: {n}" for c, n in (info.unparsed or {}).items() if n)
    return (f"{info.path}: {info.rows} tuples over {info.end - info.start:.0f} s, "
            f"{info.out_of_order} out of order ({info.late} late)"
            + (f", unparsed values kept as missing ({unparsed})" if unparsed else ""))


def _need_a_deadline(deadline: float | None, options: Mapping[str, Any], workload: Workload,
                     chosen: list, name: Name) -> None:
    """Refuse a deadline's options (min_kept, delta) when no deadline applies: neither
    ``deadline`` nor a replayed query's own in the workload, so nothing would use them."""
    if deadline is not None or any(qos(workload.query(spec.name)).get("deadline") is not None
                                   for spec, _ in chosen):
        return
    for key, value in options.items():
        if value is not None:
            given, wanted = name(key, value), name("deadline", "SECONDS").replace("'", "")
            raise CqoptError(f"{given} is given without a deadline, which it modifies: "
                             f"no {wanted.split(' ')[0]}, and no replayed query of "
                             f"{workload.source} has a deadline; give {wanted} too, or "
                             f"leave {given.split(' ')[0]} out")


def fidelity(catalog: PathLike | Catalog, workload: PathLike | Workload, out: PathLike, *,
             traces: Mapping[str, PathLike] | None = None, trace_dir: PathLike | None = None,
             charts: PathLike | None = None, k: int | None = None,
             k_sweep: tuple[int, ...] | list[int] = DEFAULT_K_SWEEP, rounds: int | None = None,
             queries: list[str] | None = None, ts_columns: Mapping[str, str] | None = None,
             replay_options: Mapping[str, Any] | None = None,
             describe: Mapping[str, str] | None = None, master: str = "local[*]",
             deadline: float | None = None, min_kept: float | None = None,
             delta: float | None = None,
             memory_budget: float | None = None, window_min: float = 0.25,
             negotiate: bool = False,
             force: bool = False, progress: bool = True, name: Name = setting_label
             ) -> dict[str, Any]:
    """Replay traces through charts into a fidelity report: the main job's last step.

    Per-round statistics are computed from the traces on Spark (one pass over
    each trace), replayed through each query's chart and every baseline, swept
    over k, and written as ``report.md`` and ``report.html`` in ``out``.

    Parameters
    ----------
    catalog : path or Catalog
    workload : path or Workload
    out : path
        The report directory to write.
    traces : mapping of str to path, optional
        Stream name to its trace (CSV, Parquet or DEC-PKT text).
    trace_dir : path, optional
        A directory of ``STREAM.<ext>`` traces (:func:`generate` writes one).
    charts : path, optional
        A chart set to replay through; without it each query's chart is built here.
    k : int, optional
        The k of charts built here (not with ``charts``).
    k_sweep : sequence of int
        The k values to sweep (empty: no sweep).
    rounds : int, optional
        Cut each trace into this many rounds instead of the query's window.
    queries : list of str, optional
        The workload's queries to replay (default: every one with traces of all
        its streams).
    ts_columns : mapping of str to str, optional
        Stream name to its trace's timestamp column.
    replay_options : mapping, optional
        :func:`cqopt.replay.replay.replay`'s keyword arguments (seed, estimator, ...).
        The estimator defaults to ``"sample"``
        (:data:`cqopt.runtime.estimators.DEFAULT_ESTIMATOR`, which says why): each round
        decided at its own statistics as a sampler of 10% of its tuples measures them.
    describe : mapping of str to str, optional
        More lines for the report's header (the policy, in words).
    master : str
        A running Spark session of this process, else a new one on this master URL.
    deadline : float, optional
        Seconds each round may take: each query's chosen plans are predicted by the
        engine model and each round shed at its inputs to fit
        (:func:`cqopt.replay.overload.deadline_replay`), reported beside the run
        without shedding (``summary["deadline"]``, the rounds table's ``kept``,
        ``missed_with``, ... columns). Default: each query's own ``deadline`` in the
        workload, if it has one.
    min_kept : float, optional
        The least share of a round's input kept, in [0, 1]; default each query's
        ``min_kept`` in the workload, else 0. A query's ``error_bound`` counts the
        rounds whose promised error exceeds it.
    delta : float, optional
        With ``deadline``: the confidence ``1 - delta`` of a COUNT's promised error
        (default 0.05). ``min_kept`` and ``delta`` are refused when no deadline applies:
        neither ``deadline`` nor a replayed query's own ``deadline`` in the workload.
    memory_budget : float, optional
        Bytes the replayed queries may hold together: PIPES' resource manager shrinks
        every query's window to the same fraction of its range ``[window_min · W, W]``
        in the rounds that would exceed it (:func:`cqopt.replay.overload.memory_replay`,
        ``summary["memory"]`` of each query).
    window_min : float
        With ``memory_budget``: the smallest window a query accepts, as a share of its own.
    negotiate : bool
        With ``deadline``: the replayed queries also share each round's deadline on one
        engine, and RTStream's inter-query negotiation lowers their common QoS level until
        every one fits (:func:`cqopt.replay.overload.negotiated_replay`,
        ``summary["negotiation"]``).
    force : bool
        Replace an existing ``out`` that cqopt wrote.
    progress : bool
        Say each step and the work counted on stderr, in the console's words (default);
        False says nothing, as ``--quiet`` does.
    name : callable
        ``name(parameter, value)`` names a parameter in messages.

    Returns
    -------
    dict of str to Replay
        Each replayed query's rounds and summary (``summary_json`` gives them as JSON).

    Raises
    ------
    CqoptError
        A bad file, query, trace or setting, before Spark starts; a failed Spark job.
    """
    import cqopt.charts as chart_sets
    from cqopt.charts.settings import check_cells
    from cqopt.charts.spec import workload_specs
    from cqopt.output import staged_directory
    from cqopt.replay.replay import k_sweep as sweep_k
    from cqopt.replay.replay import local_chart, replay
    from cqopt.replay.report import write_report
    from cqopt.replay.rounds import write_round_statistics
    from cqopt.runtime.estimators import DEFAULT_ESTIMATOR
    from cqopt.spark.trace_read import check_trace_location, report_locations

    def say(text: str) -> None:
        step(text, enabled=progress)

    # Everything is checked before any Spark work starts.
    out, traces, trace_dir = report_locations(out, traces, trace_dir, name)  # file: URIs
    if rounds is not None and not rounds >= 1:
        raise CqoptError(f"{name('rounds', rounds)}: needs a number >= 1")
    if negotiate and deadline is None:
        raise CqoptError(f"{name('negotiate', True).split(' ')[0]}: the queries negotiate to "
                         "share a "
                         "deadline; give the deadline too")
    given: dict[str, Any] = {"deadline": deadline, "min_kept": min_kept}
    if deadline is not None or min_kept is not None or delta is not None:
        given["delta"] = 0.05 if delta is None else delta
    if memory_budget is not None:
        given.update(memory_budget=memory_budget, window_min=window_min)
    OverloadSettings.judged(given, name, CqoptError)  # the values below are judged
    options = judge_settings({"k": k}, name, CqoptError)
    swept = name("k_sweep", ",".join(map(str, k_sweep)))
    ks = [judge_settings({"k": value}, lambda _, v: f"{swept}: k = {v}", CqoptError)["k"]
          for value in k_sweep]
    catalog_path = str(catalog) if not isinstance(catalog, Catalog) else catalog.source
    workload_path = str(workload) if not isinstance(workload, Workload) else workload.source
    catalog = _catalog(catalog)
    workload = _workload(workload)
    if charts and k is not None:
        raise CqoptError(f"{name('k', k)} sets the k of charts built here, but "
                         f"{name('charts', charts)} gives built charts; leave out one of them")
    paths = trace_paths(catalog, traces, trace_dir, name)
    times = {_stream_name(catalog, s, name("ts_column", f"{s}=...")): c
             for s, c in (ts_columns or {}).items()}
    for stream in times:
        if stream not in paths:
            raise CqoptError(f"{name('ts_column', f'{stream}=...')}: no trace of {stream} is "
                             "given")
    specs = workload_specs(workload, catalog, options,
                           {"k": name("k", k)} if k is not None else None)
    if queries:
        specs = [(s, q) for s, q in specs if s.name in queries]
        missing = set(queries) - {s.name for s, _ in specs}
        if missing:
            raise CqoptError(f"{name('query', ', '.join(sorted(missing)))}: not in "
                             f"{workload.source}")
    for spec, _ in specs:  # a swept chart too large to hold is refused before any work
        for value in ks:
            check_cells(spec.name, value, len(spec.axes), name("k_sweep", value))
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
    _need_a_deadline(deadline, {"min_kept": min_kept, "delta": delta}, workload, chosen, name)
    for stream in dict.fromkeys(s for _, q in chosen for s in q.stream_names):
        # missing, empty, truncated: before Spark starts (a local trace)
        check_trace_location(paths[stream], name("trace", f"{stream}={paths[stream]}"))
    chart_set = chart_sets.load(charts) if charts else None
    if chart_set is not None:
        chart_set.require_fresh(catalog, name("charts", charts))
        for spec, _ in chosen:
            stored = chart_set.charts.get(spec.name)
            if stored is not None and stored.spec.sql != spec.sql:
                raise CqoptError(f"{name('charts', charts)}: its query {spec.name} is not the "
                                 f"one in {workload.source}; rebuild the charts with cqopt build")
    out = Path(out)
    with staged_directory(out, force, kind="report") as tmp:
        observed, infos = _trace_statistics(chosen, catalog, paths, times, rounds, master,
                                            progress, name)
        unreplayed = _not_replayed(chosen, observed, infos)
        (tmp / "rounds").mkdir()
        for spec_name, table in observed.items():
            write_round_statistics(table, tmp / "rounds" / f"{spec_name}.parquet")
        replays, sweeps, used = {}, {}, {}
        options = {"estimator": DEFAULT_ESTIMATOR, **(replay_options or {})}
        for spec, query in chosen:
            if chart_set is not None and spec.name in chart_set.charts:
                used[spec.name] = chart_set[spec.name]
            else:
                used[spec.name] = local_chart(spec, catalog)
            say(f"{spec.name}: replaying {len(observed[spec.name])} rounds")
            replays[spec.name] = replay(spec.name, used[spec.name], catalog,
                                        observed[spec.name], **options)
            bounds = qos(workload.query(spec.name))
            bound = deadline if deadline is not None else bounds.get("deadline")
            if bound is not None:
                from cqopt.replay.overload import deadline_replay

                kept = min_kept if min_kept is not None else bounds.get("min_kept", 0.0)
                shed = deadline_replay(replays[spec.name], used[spec.name], catalog,
                                       observed[spec.name], bound, min_kept=kept,
                                       delta=0.05 if delta is None else delta,
                                       error_bound=bounds.get("error_bound"),
                                       quality=bounds.get("quality"))
                replays[spec.name].summary["deadline"] = shed.summary
                for column in ("predicted_s", "kept", "missed_without", "missed_with",
                               "dropped", "epsilon"):
                    replays[spec.name].rounds[f"deadline:{column}"] = shed.rounds[column]
                if shed.summary["unreachable_rounds"]:
                    print(f"{spec.name}: in {shed.summary['unreachable_rounds']} rounds no "
                          f"shedding down to {kept:.0%} of the input fits the "
                          f"{bound:g} s deadline: those run at {kept:.0%} and count as "
                          "misses", file=sys.stderr)
            if ks:
                sweeps[spec.name] = sweep_k(spec.name, used[spec.name].spec, catalog,
                                            observed[spec.name], ks, **options)
        if negotiate:
            from cqopt.replay.overload import negotiated_replay

            say(f"{', '.join(replays)}: negotiating a common QoS level for each round")
            shared = negotiated_replay(
                replays, used, catalog, observed, deadline,
                {n: qos(workload.query(n)).get("quality") for n in replays})
            for name_ in replays:
                replays[name_].summary["negotiation"] = shared.summary
        if memory_budget is not None:
            from cqopt.replay.overload import memory_replay

            held = memory_replay(replays, used, catalog, observed, memory_budget,
                                 window_min=window_min)
            for name_ in replays:
                replays[name_].summary["memory"] = held.summary
            if held.summary["over_budget_after"]:
                print(f"in {held.summary['over_budget_after']} rounds even windows of "
                      f"{window_min:.0%} exceed the {memory_budget:,.0f} B budget: they run at "
                      "the least windows and count as over budget", file=sys.stderr)
        meta = {"catalog": catalog_path, "workload": workload_path,
                **{f"trace {s}": _describe(info) for s, info in infos.items()},
                **unreplayed,
                "charts": str(charts) if charts else "built for this report",
                **(describe or {})}
        write_report(tmp, replays, used, sweeps, meta)
    return replays


def _not_replayed(chosen, observed: Mapping[str, pd.DataFrame], infos: Mapping[str, Any]
                  ) -> dict[str, str]:
    """Each query's tuples after its last whole round, said on stderr; the report's lines."""
    from cqopt.replay.rounds import tuples_not_replayed

    lines = {}
    for spec, query in chosen:
        table = observed[spec.name]
        left = tuples_not_replayed(table, {s: infos[s].rows for s in query.stream_names})
        if left:
            lines[f"not replayed {spec.name}"] = (
                f"the last {', '.join(f'{n:,} tuples of {s}' for s, n in left.items())}, "
                f"after the last whole round ({len(table)} rounds of "
                f"{table.attrs['window_s']:g} s), were not replayed")
            print(f"{spec.name}: {lines[f'not replayed {spec.name}']}", file=sys.stderr)
    return lines


def _trace_statistics(chosen, catalog: Catalog, paths: Mapping[str, str],
                      times: Mapping[str, str], rounds: int | None, master: str,
                      progress: bool, name: Name
                      ) -> tuple[dict[str, pd.DataFrame], dict[str, Any]]:
    """Each chosen query's per-round statistics from its traces: one Spark pass over each.

    Returns the tables by query name and what was read of each stream's trace.
    """
    def say(text: str) -> None:
        step(text, enabled=progress)

    from cqopt.spark.job_progress import spark_tasks
    from cqopt.spark.round_stats import workload_round_statistics
    from cqopt.spark.session import running_session
    from cqopt.spark.trace_read import read_trace

    frames, infos = {}, {}
    with running_session(master, progress=say if progress else False) as spark:
        for stream in dict.fromkeys(s for _, q in chosen for s in q.stream_names):
            say(f"{stream}: reading {paths[stream]}")
            with spark_tasks(spark, f"reading {stream}'s trace", enabled=progress):
                frames[stream], infos[stream] = read_trace(spark, paths[stream],
                                                           catalog.stream(stream),
                                                           ts_column=times.get(stream))
        for spec, query in chosen:
            check_span(spec.name, {s: infos[s] for s in query.stream_names},
                       query.round_seconds(), rounds, name)
        say(f"{', '.join(spec.name for spec, _ in chosen)}: per-round statistics on "
            "Spark, one pass over each trace")
        with spark_tasks(spark, "per-round statistics", enabled=progress):
            tables = workload_round_statistics(
                [query for _, query in chosen], frames,
                [query.round_seconds() for _, query in chosen], rounds=rounds)
    return {spec.name: table for (spec, _), table in zip(chosen, tables)}, infos



def run(catalog: PathLike | Catalog, workload: PathLike | Workload, charts: PathLike,
        query: str, sources: Mapping[str, Any], out: PathLike, *,
        settings: RunSettings | None = None, master: str = "local[*]",
        progress: bool | Callable[[str], None] = False,
        conf: Mapping[str, str] | None = None, ui: bool = False) -> RunResult:
    """Run one query of a workload adaptively on Spark Structured Streaming, into a run folder.

    Each complete round of the sources' tuples is observed, its plan looked up
    in the query's chart (OM's Algorithm 2), run on Spark and written to
    ``out/results``, with a round log and a report (:mod:`cqopt.spark.run`).
    A run killed or stopped resumes where it stopped when run again with the
    same ``out``.

    Parameters
    ----------
    catalog : path or Catalog
        The catalog the charts were built with.
    workload : path or Workload
    charts : path
        The chart set (:func:`build`), checked against ``catalog``.
    query : str
        The workload's query to run.
    sources : mapping of str to str or Source
        Each stream of the query: a directory of Parquet or CSV files (one per
        round, as ``generate(..., file_per_round=W)`` writes), ``"rate:N"`` for
        Spark's rate source at N rows/s, or a :class:`~cqopt.spark.run.Source`.
    out : path
        The run folder: new, empty, or one this query ran in before (it resumes).
    settings : RunSettings, optional
        The trigger, shadow timing, policy, deadline, ...
        (:class:`~cqopt.spark.run.RunSettings`; default its defaults).
    master : str
        A running Spark session of this process, else a new one on this master URL.
    progress : bool or callable
        Progress lines on stderr, or to this callable.
    conf : mapping of str to str, optional
        Spark settings of a new session (``spark.KEY``).
    ui : bool
        Turn the Spark UI on (its address is said).

    Returns
    -------
    RunResult
        Every round logged in ``out`` (earlier runs' too) and the report's summary.

    Raises
    ------
    CqoptError
        A bad file, query, source, setting or run folder, before Spark starts;
        a failed Spark job.
    """
    from cqopt.charts.spec import workload_specs
    from cqopt.spark.run import AdaptiveRun, RunSettings
    from cqopt.spark.run.sources import check_source_files, match_sources
    from cqopt.spark.run.state import check_run_folder
    from cqopt.spark.session import running_session

    # Everything is checked before Spark starts.
    settings = RunSettings() if settings is None else settings
    catalog = _catalog(catalog)
    workload = _workload(workload)
    specs = {spec.name: (spec, q) for spec, q in workload_specs(workload, catalog)}
    if query not in specs:
        raise CqoptError(f"--query {query}: not in {workload.source}; it has "
                         + ", ".join(specs))
    spec, parsed = specs[query]
    chart = _run_charts(charts, catalog, workload, [spec])[query]
    matched = match_sources(sources, parsed.stream_names, query, settings.trigger,
                            list(catalog.streams))
    check_source_files(matched.values(), catalog)
    # A folder of another query's run is refused here, before Spark starts; the loop
    # checks the rest of the run's identity (its sources, its round) when it opens it.
    out = check_run_folder(out, {"query": query, "sql": parsed.sql})  # file: URIs too
    say = progress if callable(progress) else (
        (lambda line: print(line, file=sys.stderr, flush=True)) if progress else
        (lambda _: None))
    with running_session(master, progress=say if progress else False, conf=conf,
                         ui=ui) as spark:
        return AdaptiveRun(spark, query, parsed, chart, catalog, matched, out, settings,
                           progress=say).run()


def _run_charts(charts: PathLike, catalog: Catalog, workload: Workload,
                specs: list) -> dict[str, Any]:
    """Each query's chart from the chart set ``charts``, refused in one line when the set
    is stale (another catalog), lacks the query, or holds another query of that name."""
    import cqopt.charts as chart_sets

    chart_set = chart_sets.load(charts)
    chart_set.require_fresh(catalog, f"--charts {charts}")
    found = {}
    for spec in specs:
        if spec.name not in chart_set:
            raise CqoptError(f"--charts {charts}: has no chart for query {spec.name} of "
                             f"{workload.source}; build it with cqopt build")
        chart = chart_set[spec.name]
        if chart.spec.sql != spec.sql:
            raise CqoptError(f"--charts {charts}: its query {spec.name} is not the one in "
                             f"{workload.source} (stale); rebuild the charts with cqopt build")
        found[spec.name] = chart
    return found


def run_workload(catalog: PathLike | Catalog, workload: PathLike | Workload,
                 charts: PathLike, sources: Mapping[str, Any], out: PathLike, *,
                 queries: list[str] | None = None, settings: RunSettings | None = None,
                 master: str = "local[*]", progress: bool | Callable[[str], None] = False,
                 conf: Mapping[str, str] | None = None, ui: bool = False) -> WorkloadResult:
    """Run a workload's queries together on Spark Structured Streaming: one streaming query
    over every stream they read, each query's rounds, plans and results its own.

    Each stream is read and collected once per micro-batch; each query's
    complete rounds are cut by its own window and chosen from its own chart,
    and (without shadow timing or a deadline) every query's plans run as one
    Spark job per micro-batch (:mod:`cqopt.spark.run.workload`). Each query's
    results, round log and report go to ``out/QUERY/``, as :func:`run` writes
    them; ``out/report.md`` has a section per query. A killed run resumes
    every query where it stopped.

    Parameters
    ----------
    catalog, workload, charts :
        As :func:`run`.
    sources : mapping of str to str or Source
        Each stream any of the queries reads (as :func:`run` takes them).
    out : path
        The run folder: new, empty, or one this workload ran in before (it resumes).
    queries : list of str, optional
        The queries to run; default every query of the workload.
    settings : RunSettings, optional
        Every query's settings.
    master, progress :
        As :func:`run`.
    conf : mapping of str to str, optional
        Spark settings of a new session (``spark.KEY``).
    ui : bool
        Turn the Spark UI on (its address is said).

    Returns
    -------
    WorkloadResult
        Per query its rounds and report summary, and its failed micro-batches.

    Raises
    ------
    CqoptError
        Before Spark starts: an unknown query, two queries with one output
        folder, a chart missing or stale, a stream a query reads without a
        source (or a source no query reads), a bad setting or run folder.
    """
    from cqopt.charts.spec import workload_specs
    from cqopt.spark.run import RunSettings
    from cqopt.spark.run.sources import Source, match_sources
    from cqopt.spark.run.state import check_run_folder
    from cqopt.spark.run.workload import WorkloadRun, check_output_names
    from cqopt.spark.session import running_session

    settings = RunSettings() if settings is None else settings
    catalog = _catalog(catalog)
    workload = _workload(workload)
    specs = {spec.name: (spec, q) for spec, q in workload_specs(workload, catalog)}
    names = list(specs) if not queries else list(queries)
    check_output_names(names)
    for name in names:
        if name not in specs:
            raise CqoptError(f"--query {name}: not in {workload.source}; it has "
                             + ", ".join(specs))
    chosen = {name: specs[name] for name in names}
    found = _run_charts(charts, catalog, workload, [spec for spec, _ in chosen.values()])
    read = {s.lower(): s for _, q in chosen.values() for s in q.stream_names}
    parsed: dict[str, Source] = {}
    for key, source in sources.items():
        stream = read.get(key.lower())
        if stream is None:
            raise CqoptError(f"--source {key}=...: no query run reads a stream {key}; they "
                             f"read {', '.join(sorted(read.values()))}")
        parsed[stream] = Source.parse(stream, source) if isinstance(source, str) else source
    for name, (_, query) in chosen.items():
        missing = [s for s in query.stream_names if s not in parsed]
        if missing:
            raise CqoptError(f"no --source for stream {missing[0]}, which query {name} "
                             f"reads; pass --source {missing[0]}=DIR (or "
                             f"{missing[0]}=FORMAT:OPTIONS)")
        match_sources({s: parsed[s] for s in query.stream_names}, query.stream_names, name,
                      settings.trigger, list(catalog.streams))
    out = check_run_folder(out)  # a local path: file: URIs taken, others refused
    say = progress if callable(progress) else (
        (lambda line: print(line, file=sys.stderr, flush=True)) if progress else
        (lambda _: None))
    with running_session(master, progress=say if progress else False, conf=conf,
                         ui=ui) as spark:
        return WorkloadRun(spark, {n: (q, found[n]) for n, (_, q) in chosen.items()},
                           catalog, parsed, out, settings, progress=say).run()

__all__ = ["build", "check_span", "fidelity", "generate", "run", "run_workload",
           "trace_paths"]
