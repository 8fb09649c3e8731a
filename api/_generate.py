"""``generate``: seeded stream traces, bursty arrivals and drifting Zipf-skewed values."""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from cqopt.api._common import Name, PathLike, as_catalog
from cqopt.catalog import Catalog
from cqopt.charts.settings import setting_label
from cqopt.errors import CqoptError, parse_number
from cqopt.location import local_output
from cqopt.progress import say as step

if TYPE_CHECKING:
    import pandas as pd

# A generated trace is held in memory as one frame per stream (about 40 bytes a tuple).
MAX_GENERATED_TUPLES = 5e7
# Files a per-round trace writes per stream: a day of 1-second rounds is 86,400.
MAX_ROUND_FILES = 100_000


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
    import numpy as np

    from cqopt.output import staged_directory
    from cqopt.replay.trace_write import write_trace

    catalog = as_catalog(catalog)
    chosen = _chosen_streams(catalog, streams, name)
    if not (0 < duration < math.inf):
        raise CqoptError(f"{name('duration', duration)}: needs a positive number of seconds")
    if not (0 <= rate_cv < math.inf):
        raise CqoptError(f"{name('rate_cv', rate_cv)}: needs a number >= 0")
    gaps = _interarrivals(interarrivals, name)
    scales = _rate_scales(catalog, rate_scale, name)
    if not (offset >= 0 and np.isfinite(offset)):
        raise CqoptError(f"{name('offset', offset)}: needs a number of seconds >= 0")
    _check_sizes(chosen, duration, gaps, scales, name)
    uniform = _steady_columns(catalog, steady, name)
    written = _trace_format(format, file_per_round, duration, name)
    frames = {}
    out = local_output(out, "trace set", name("out", out))
    with staged_directory(out, force, kind="trace set") as tmp:
        for stream, frame in _traces(chosen, duration, seed, rate_cv, gaps, offset, scales,
                                     uniform):
            if file_per_round:
                frames[stream.name] = frame
                continue
            path = write_trace(frame, tmp / f"{stream.name}{written.suffixes[0]}", format)
            step(f"{stream.name}: {len(frame)} tuples over {duration:g} s -> "
                 f"{out / path.name}", enabled=progress)
        _write_rounds(frames, tmp, out, duration, file_per_round, format, progress)
    return out


def _chosen_streams(catalog: Catalog, streams: list[str] | None, name: Name) -> list:
    """The catalog's streams ``streams`` names (default: all), each once."""
    chosen: list = []
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
    return chosen


def _interarrivals(interarrivals: PathLike | None, name: Name):
    """The real inter-arrival times of ``interarrivals`` (None without one), read once."""
    import zlib

    from cqopt.replay.trace_generate import load_interarrivals

    try:
        return load_interarrivals(interarrivals) if interarrivals else None
    except (EOFError, OSError, ValueError, zlib.error) as err:  # a truncated .gz, ...
        raise CqoptError(f"{name('interarrivals', interarrivals)}: not a readable CSV file "
                         f"({type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''})"
                         ) from None


def _rate_scales(catalog: Catalog, rate_scale: Mapping[str, float | str] | None,
                 name: Name) -> dict[str, float]:
    """Stream (the catalog's spelling) to its factor on the arrival rate, each > 0."""
    import numpy as np

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
    return scales


def _check_sizes(chosen: list, duration: float, gaps, scales: Mapping[str, float],
                 name: Name) -> None:
    """Refuse a stream that would get no tuple, or more than memory holds, before any
    allocation (1e12 s would ask for a TiB)."""
    import numpy as np

    for stream in chosen:
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


def _steady_columns(catalog: Catalog, steady: list[str] | None,
                    name: Name) -> dict[str, dict[str, int]]:
    """Stream to its steady columns and their domains, from ``STREAM.COLUMN[=DOMAIN]``."""
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
    return uniform


def _trace_format(format: str, file_per_round: float | None, duration: float, name: Name):
    """The registered trace format ``format``, refused for files per round it cannot stream
    or too many of them."""
    from cqopt.replay.trace_format import get_trace_format, streamed_formats

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
    return written


def _traces(chosen: list, duration: float, seed: int, rate_cv: float, gaps, offset: float,
            scales: Mapping[str, float], uniform: Mapping[str, dict[str, int]]):
    """Each chosen stream and its generated trace, one at a time (each written before the
    next is drawn)."""
    from cqopt.replay.trace_generate import generate_trace, interarrival_slice

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
        yield stream, frame


def _write_rounds(frames: Mapping[str, pd.DataFrame], tmp: Path, out: Path, duration: float,
                  file_per_round: float | None, format: str, progress: bool) -> None:
    """Each stream in ``frames`` as a folder of one file per ``file_per_round`` seconds."""
    from cqopt.replay.trace_write import write_trace_per_round

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
