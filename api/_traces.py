"""The traces a pipeline reads: which file is which stream's, how long they may span, and
their per-round statistics, computed on Spark in one pass over each.

:func:`cqopt.api.fidelity` replays them, ``build(ranges_from=...)`` spans a
chart's axes over them and ``explain(analyze=...)`` runs plans on one of
their rounds.

>>> from cqopt.examples import example
>>> from cqopt.catalog import load_catalog
>>> trace_paths(load_catalog(example("dec-pkt.toml")), {"tcp": "traces/TCP.csv"})
{'TCP': 'traces/TCP.csv'}
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cqopt.api._common import Name, PathLike
from cqopt.catalog import Catalog
from cqopt.charts.settings import setting_label
from cqopt.errors import CqoptError
from cqopt.progress import say as step

if TYPE_CHECKING:
    import pandas as pd

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
        paths[stream_name(catalog, stream, name("trace", f"{stream}=..."))] = str(path)
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


def stream_name(catalog: Catalog, stream: str, given: str) -> str:
    """The catalog's spelling of ``stream``; an unknown one refused, named as ``given``."""
    found = catalog.stream(stream)
    if found is None:
        raise CqoptError(f"{given}: the catalog has no stream {stream!r}; it has "
                         + ", ".join(catalog.streams))
    return found.name


def describe_trace(info) -> str:
    """What was read of a trace, in one line of a report's header."""
    unparsed = ", ".join(f"{c}: {n}" for c, n in (info.unparsed or {}).items() if n)
    return (f"{info.path}: {info.rows} tuples over {info.end - info.start:.0f} s, "
            f"{info.out_of_order} out of order ({info.late} late)"
            + (f", unparsed values kept as missing ({unparsed})" if unparsed else ""))



def trace_statistics(chosen, catalog: Catalog, paths: Mapping[str, str],
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
