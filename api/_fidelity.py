"""``fidelity``: traces replayed through charts into a report, the main job's last step."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cqopt.api._common import Name, PathLike, as_catalog, as_workload
from cqopt.api._traces import describe_trace, stream_name, trace_paths, trace_statistics
from cqopt.catalog import Catalog
from cqopt.charts.overload_settings import OverloadSettings
from cqopt.charts.settings import judge_settings, setting_label
from cqopt.charts.workload import Workload, qos
from cqopt.errors import CqoptError
from cqopt.progress import say as step

if TYPE_CHECKING:
    import pandas as pd

DEFAULT_K_SWEEP = (2, 5, 10, 20, 40)


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

    def say(text: str) -> None:
        step(text, enabled=progress)

    # Everything is checked before any Spark work starts.
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
    catalog = as_catalog(catalog)
    workload = as_workload(workload)
    if charts and k is not None:
        raise CqoptError(f"{name('k', k)} sets the k of charts built here, but "
                         f"{name('charts', charts)} gives built charts; leave out one of them")
    paths = trace_paths(catalog, traces, trace_dir, name)
    times = {stream_name(catalog, s, name("ts_column", f"{s}=...")): c
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
    from cqopt.replay.trace_format import check_trace_files

    for stream in dict.fromkeys(s for _, q in chosen for s in q.stream_names):
        check_trace_files(paths[stream])  # missing, empty, truncated: before Spark starts
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
        observed, infos = trace_statistics(chosen, catalog, paths, times, rounds, master,
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
                **{f"trace {s}": describe_trace(info) for s, info in infos.items()},
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
