"""``fidelity``: traces replayed through charts into a report, the main job's last step."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cqopt.api._common import Name, PathLike, as_catalog, as_workload
from cqopt.api._fidelity_options import FidelityOptions, gathered
from cqopt.api._traces import describe_trace, stream_name, trace_paths, trace_statistics
from cqopt.catalog import Catalog
from cqopt.charts.settings import setting_label
from cqopt.charts.workload import Workload, qos
from cqopt.errors import CqoptError
from cqopt.progress import say as step

if TYPE_CHECKING:
    import pandas as pd

    from cqopt.replay.replay import Replay

# The columns a deadline's replay adds to a query's rounds, as ``deadline:COLUMN``.
DEADLINE_COLUMNS = ("predicted_s", "kept", "missed_without", "missed_with", "dropped",
                    "epsilon")


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
             ts_columns: Mapping[str, str] | None = None, charts: PathLike | None = None,
             options: FidelityOptions | None = None, force: bool = False,
             progress: bool = True, name: Name = setting_label, **settings: Any
             ) -> dict[str, Replay]:
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
    ts_columns : mapping of str to str, optional
        Stream name to its trace's timestamp column.
    charts : path, optional
        A chart set to replay through; without it each query's chart is built here.
    options : FidelityOptions, optional
        How to replay: the k sweep, the rounds and queries, the replay's estimator
        and policy, a deadline, a memory budget, negotiation, the Spark master
        (:class:`~cqopt.api.FidelityOptions`, judged when made).
    force : bool
        Replace an existing ``out`` that cqopt wrote.
    progress : bool
        Say each step and the work counted on stderr, in the console's words (default);
        False says nothing, as ``--quiet`` does.
    name : callable
        ``name(parameter, value)`` names a parameter in messages.
    **settings
        Instead of ``options``: its settings as keywords (``k=3``, ``k_sweep=[2]``,
        ``deadline=0.8``, ``replay_options={"estimator": "decay"}``, ...), gathered
        into one. Giving both, or a keyword that is no setting, is refused.

    Returns
    -------
    dict of str to Replay
        Each replayed query's rounds and summary (``summary_json`` gives them as JSON).

    Raises
    ------
    CqoptError
        A bad file, query, trace or setting, before Spark starts; a failed Spark job.
    """
    from cqopt.output import staged_directory
    from cqopt.replay.report import write_report  # pandas, matplotlib: missing, said first

    from cqopt.spark.trace_read import report_locations

    # Everything is checked before any Spark work starts.
    out, traces, trace_dir = report_locations(out, traces, trace_dir, name)  # file: URIs
    options = gathered(options, settings, name)
    where = {"catalog": str(catalog) if not isinstance(catalog, Catalog) else catalog.source,
             "workload": str(workload) if not isinstance(workload, Workload)
             else workload.source}
    catalog = as_catalog(catalog)
    workload = as_workload(workload)
    if charts and options.k is not None:
        raise CqoptError(f"{name('k', options.k)} sets the k of charts built here, but "
                         f"{name('charts', charts)} gives built charts; leave out one of them")
    paths = trace_paths(catalog, traces, trace_dir, name)
    times = _timestamp_columns(catalog, ts_columns, paths, name)
    chosen = _chosen_queries(workload, catalog, options, paths, name)
    chart_set = _chart_set(charts, catalog, workload, chosen, name)
    with staged_directory(Path(out), force, kind="report") as tmp:
        observed, infos = trace_statistics(chosen, catalog, paths, times, options.rounds,
                                           options.master, progress, name)
        unreplayed = _not_replayed(chosen, observed, infos)
        _write_rounds(tmp, observed)
        replays, sweeps, used = _replayed(chosen, chart_set, catalog, workload, observed,
                                          options, progress)
        meta = {**where,
                **{f"trace {s}": describe_trace(info) for s, info in infos.items()},
                **unreplayed,
                "charts": str(charts) if charts else "built for this report",
                **options.describe}
        write_report(tmp, replays, used, sweeps, meta)
    return replays


def _timestamp_columns(catalog: Catalog, ts_columns: Mapping[str, str] | None,
                       paths: Mapping[str, str], name: Name) -> dict[str, str]:
    """Stream (the catalog's spelling) to its trace's timestamp column, each of a trace
    given."""
    times = {stream_name(catalog, s, name("ts_column", f"{s}=...")): c
             for s, c in (ts_columns or {}).items()}
    for stream in times:
        if stream not in paths:
            raise CqoptError(f"{name('ts_column', f'{stream}=...')}: no trace of {stream} is "
                             "given")
    return times


def _chosen_queries(workload: Workload, catalog: Catalog, options: FidelityOptions,
                    paths: Mapping[str, str], name: Name) -> list:
    """The (chart spec, query) pairs to replay: those asked for (default all) that have a
    trace of every stream, each said when skipped; their traces checked before Spark."""
    from cqopt.charts.settings import check_cells
    from cqopt.charts.spec import workload_specs
    from cqopt.spark.trace_read import check_trace_location

    k = {"k": options.k} if options.k is not None else {}
    specs = workload_specs(workload, catalog, k,
                           {"k": name("k", options.k)} if options.k is not None else None)
    if options.queries:
        specs = [(s, q) for s, q in specs if s.name in options.queries]
        missing = set(options.queries) - {s.name for s, _ in specs}
        if missing:
            raise CqoptError(f"{name('query', ', '.join(sorted(missing)))}: not in "
                             f"{workload.source}")
    for spec, _ in specs:  # a swept chart too large to hold is refused before any work
        for value in options.k_sweep:
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
    _need_a_deadline(options.deadline, {"min_kept": options.min_kept, "delta": options.delta},
                     workload, chosen, name)
    for stream in dict.fromkeys(s for _, q in chosen for s in q.stream_names):
        # missing, empty, truncated: before Spark starts (a local trace)
        check_trace_location(paths[stream], name("trace", f"{stream}={paths[stream]}"))
    return chosen


def _chart_set(charts: PathLike | None, catalog: Catalog, workload: Workload, chosen: list,
               name: Name):
    """The chart set ``charts`` (None without one), refused when stale or when it holds
    another query of a replayed query's name."""
    if not charts:
        return None
    import cqopt.charts as chart_sets

    chart_set = chart_sets.load(charts)
    chart_set.require_fresh(catalog, name("charts", charts))
    for spec, _ in chosen:
        stored = chart_set.charts.get(spec.name)
        if stored is not None and stored.spec.sql != spec.sql:
            raise CqoptError(f"{name('charts', charts)}: its query {spec.name} is not the "
                             f"one in {workload.source}; rebuild the charts with cqopt build")
    return chart_set


def _write_rounds(tmp: Path, observed: Mapping[str, pd.DataFrame]) -> None:
    """Each query's per-round statistics as ``rounds/QUERY.parquet`` (build --ranges-from
    reads them)."""
    from cqopt.replay.rounds import write_round_statistics

    (tmp / "rounds").mkdir()
    for spec_name, table in observed.items():
        write_round_statistics(table, tmp / "rounds" / f"{spec_name}.parquet")


def _replayed(chosen: list, chart_set, catalog: Catalog, workload: Workload,
              observed: Mapping[str, pd.DataFrame], options: FidelityOptions, progress: bool
              ) -> tuple[dict[str, Replay], dict[str, pd.DataFrame], dict[str, Any]]:
    """Each query replayed through its chart (from ``chart_set``, else built here), shed to
    its deadline and swept over k; then the workload's negotiation and memory budget.

    Returns each query's :class:`Replay`, its summary built once with what the
    deadline, the negotiation and the budget found; the k sweeps; the charts used.
    """
    from cqopt.replay.replay import Replay, local_chart, replay
    from cqopt.replay.replay import k_sweep as sweep_k

    base, shed, sweeps, used = {}, {}, {}, {}
    for spec, _ in chosen:
        used[spec.name] = (chart_set[spec.name] if chart_set is not None
                           and spec.name in chart_set.charts else local_chart(spec, catalog))
        step(f"{spec.name}: replaying {len(observed[spec.name])} rounds", enabled=progress)
        base[spec.name] = replay(spec.name, used[spec.name], catalog, observed[spec.name],
                                 **options.replay_options)
        shed[spec.name] = _shed_to_deadline(base[spec.name], used[spec.name], catalog,
                                            observed[spec.name], workload, options)
        if options.k_sweep:
            sweeps[spec.name] = sweep_k(spec.name, used[spec.name].spec, catalog,
                                        observed[spec.name], list(options.k_sweep),
                                        **options.replay_options)
    shared = _shared_overload(base, used, catalog, workload, observed, options, progress)
    replays = {}
    for name_, done in base.items():
        deadline = shed[name_]
        rounds = done.rounds if deadline is None else done.rounds.assign(**{
            f"deadline:{column}": deadline.rounds[column] for column in DEADLINE_COLUMNS})
        summary = {**done.summary, **({} if deadline is None else
                                      {"deadline": deadline.summary}), **shared}
        replays[name_] = Replay(done.name, rounds, summary, done.plans)
    return replays, sweeps, used


def _shed_to_deadline(done: Replay, chart, catalog: Catalog, observed: pd.DataFrame,
                      workload: Workload, options: FidelityOptions):
    """The query's rounds shed to its deadline (the options', else its own in the
    workload), or None without one; rounds no shedding fits are said on stderr."""
    bounds = qos(workload.query(done.name))
    bound = options.deadline if options.deadline is not None else bounds.get("deadline")
    if bound is None:
        return None
    from cqopt.replay.overload import deadline_replay

    kept = options.min_kept if options.min_kept is not None else bounds.get("min_kept", 0.0)
    shed = deadline_replay(done, chart, catalog, observed, bound, min_kept=kept,
                           delta=options.replay_delta, error_bound=bounds.get("error_bound"),
                           quality=bounds.get("quality"))
    if shed.summary["unreachable_rounds"]:
        print(f"{done.name}: in {shed.summary['unreachable_rounds']} rounds no "
              f"shedding down to {kept:.0%} of the input fits the "
              f"{bound:g} s deadline: those run at {kept:.0%} and count as "
              "misses", file=sys.stderr)
    return shed


def _shared_overload(replays: Mapping[str, Replay], used: Mapping[str, Any], catalog: Catalog,
                     workload: Workload, observed: Mapping[str, pd.DataFrame],
                     options: FidelityOptions, progress: bool) -> dict[str, Any]:
    """What the queries share under overload, each query's summary entries: the
    negotiation of a common QoS level (``negotiation``) and the memory budget's windows
    (``memory``), as the options ask for them."""
    found: dict[str, Any] = {}
    if options.negotiate:
        from cqopt.replay.overload import negotiated_replay

        step(f"{', '.join(replays)}: negotiating a common QoS level for each round",
             enabled=progress)
        found["negotiation"] = negotiated_replay(
            dict(replays), dict(used), catalog, dict(observed), options.deadline,
            {n: qos(workload.query(n)).get("quality") for n in replays}).summary
    if options.memory_budget is not None:
        from cqopt.replay.overload import memory_replay

        held = memory_replay(dict(replays), dict(used), catalog, dict(observed),
                             options.memory_budget, window_min=options.window_min)
        found["memory"] = held.summary
        if held.summary["over_budget_after"]:
            print(f"in {held.summary['over_budget_after']} rounds even windows of "
                  f"{options.window_min:.0%} exceed the {options.memory_budget:,.0f} B "
                  "budget: they run at the least windows and count as over budget",
                  file=sys.stderr)
    return found


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
