"""``run`` and ``run_workload``: queries run adaptively on Spark Structured Streaming."""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cqopt.api._common import PathLike, as_catalog, as_workload
from cqopt.catalog import Catalog
from cqopt.charts.workload import Workload
from cqopt.errors import CqoptError

if TYPE_CHECKING:
    from cqopt.spark.run import RunResult, RunSettings
    from cqopt.spark.run.workload import WorkloadResult


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
    catalog = as_catalog(catalog)
    workload = as_workload(workload)
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
    catalog = as_catalog(catalog)
    workload = as_workload(workload)
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
