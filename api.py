"""cqopt's pipelines as Python functions: what the ``cqopt`` commands run, without a shell.

:func:`build` builds a workload's plan charts (in this process or on Spark)
and writes them as a chart set; :func:`generate` writes seeded stream traces;
:func:`fidelity` replays traces through charts into a report. The command
line parses its options and calls these; each checks everything it is given
before any work, and raises a :class:`~cqopt.errors.CqoptError` that says
what was wrong. ``cqopt.build``, ``cqopt.generate`` and ``cqopt.fidelity``
are these functions.

A message names a parameter as Python spells it (``k = 0``); the command
line passes ``name=`` so that its messages name the option (``--k 0``).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cqopt.catalog import Catalog, load_catalog
from cqopt.charts.settings import check_together, judge_settings, setting_label
from cqopt.charts.workload import Workload, load_workload
from cqopt.errors import CqoptError

if TYPE_CHECKING:
    from cqopt.charts.kernel import Chart

PathLike = str | os.PathLike
Name = Callable[[str, Any], str]  # how a message names a parameter and its value
# A generated trace is held in memory as one frame per stream (about 40 bytes a tuple).
MAX_GENERATED_TUPLES = 5e7


def _catalog(catalog: PathLike | Catalog) -> Catalog:
    return catalog if isinstance(catalog, Catalog) else load_catalog(catalog)


def _workload(workload: PathLike | Workload) -> Workload:
    return workload if isinstance(workload, Workload) else load_workload(workload)


def build(catalog: PathLike | Catalog, workload: PathLike | Workload,
          out: PathLike | None = None, *, engine: str = "local", k: int | None = None,
          model: str | None = None, weights: tuple[float, ...] | None = None,
          refine: int | None = None, depth: int | None = None, reduce: float | None = None,
          master: str = "local[*]", force: bool = False, progress: bool = False,
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
    engine : {"local", "spark"}
        Cost the cells in this process or on Spark (``master``).
    k, model, weights
        Override the workload's k, cost model and utility weights for every query.
    refine, depth : int, optional
        Refined charts of at most ``refine`` regions (to ``depth``) instead of grids.
    reduce : float, optional
        Anorexic reduction at this cost-increase threshold in [0, 1).
    master : str
        With ``engine="spark"``: a running session of this process, else a new one
        on this master URL.
    force : bool
        Replace an existing ``out`` that cqopt wrote.
    progress : bool
        Progress on stderr.
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

    if engine not in ("local", "spark"):
        raise CqoptError(f"{name('engine', engine)}: expected local or spark")
    if out is not None:
        check_writable(Path(out), force)  # before any work
    given = {"k": k, "model": model, "weights": weights, "refine": refine, "depth": depth,
             "reduce": reduce}
    options = judge_settings(given, name, CqoptError)
    check_together(options, lambda path, value: name(path, given.get(path)), CqoptError)
    catalog = _catalog(catalog)
    workload = _workload(workload)
    labels = {key: name(key, value) for key, value in given.items() if value is not None}
    specs = [spec for spec, _ in workload_specs(workload, catalog, options, labels)]
    shape = {key: options.get(key) for key in ("refine", "depth", "reduce")}
    if shape["refine"] is not None:  # every bad budget or depth before Spark starts
        for spec in specs:
            check_refinement(spec, shape["refine"], shape["depth"])
    extra: dict[str, Any] = {}
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


def generate(catalog: PathLike | Catalog, out: PathLike, *, streams: list[str] | None = None,
             duration: float = 600.0, seed: int = 0, rate_cv: float = 0.25,
             interarrivals: PathLike | None = None, offset: float = 0.0,
             rate_scale: Mapping[str, float | str] | None = None,
             steady: list[str] | None = None, format: str = "parquet",
             file_per_round: float | None = None, force: bool = False,
             progress: bool = False, name: Name = setting_label) -> Path:
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
    format : {"parquet", "csv", "dec"}
    file_per_round : float, optional
        Write each stream as a directory of one file per this many seconds.
    force : bool
        Replace an existing ``out`` that cqopt wrote.
    progress : bool
        A line per stream on stderr.
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

    from cqopt.charts.staging import staged_directory
    from cqopt.replay.trace_generate import generate_trace, interarrival_slice, \
        load_interarrivals
    from cqopt.replay.trace_write import write_trace, write_trace_per_round

    catalog = _catalog(catalog)
    chosen = []
    for stream_name in streams or list(catalog.streams):
        stream = catalog.stream(stream_name)
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
            value = float(factor)
        except (TypeError, ValueError):
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
            domain = int(size) if size else 1000
        except ValueError:
            raise CqoptError(f"{name('steady', repr(item))}: the domain must be a whole "
                             "number") from None
        uniform.setdefault(stream.name, {})[stream.column(column).name] = domain
    if file_per_round is not None and not (file_per_round > 0 and format != "dec"):
        raise CqoptError(f"{name('file_per_round', file_per_round)}: needs a positive number "
                         "of seconds and the parquet or csv format")
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
            path = write_trace(frame, tmp / f"{stream.name}.{format}")
            if progress:
                print(f"{stream.name}: {len(frame)} tuples over {duration:g} s -> "
                      f"{out / path.name}", file=sys.stderr)
        # One origin for every stream, so that file r of each stream is the same round.
        origin = min((float(f["ts"].min()) for f in frames.values() if len(f)), default=0.0)
        for stream_name, frame in frames.items():
            parts = write_trace_per_round(frame, tmp / stream_name, file_per_round,
                                          start=origin, fmt=format,
                                          rounds=math.ceil((duration - origin)
                                                           / file_per_round))
            if progress:
                print(f"{stream_name}: {len(frame)} tuples over {duration:g} s -> "
                      f"{len(parts)} files of {file_per_round:g} s in {out / stream_name}",
                      file=sys.stderr)
    return out


__all__ = ["build", "generate"]
