"""``build``: a workload's plan charts, built in this process or on Spark, as a chart set."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cqopt.api._common import Name, PathLike, as_catalog, as_workload
from cqopt.api._traces import trace_paths, trace_statistics
from cqopt.catalog import Catalog
from cqopt.charts.settings import judge_options, setting_label
from cqopt.charts.workload import Workload
from cqopt.errors import CqoptError
from cqopt.location import local_output
from cqopt.progress import say as step

if TYPE_CHECKING:
    from cqopt.charts.kernel import Chart


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
        out = local_output(out, "chart set", name("out", out))
        check_writable(out, force, kind="chart set")  # before any work
    given = {"k": k, "model": model, "weights": weights, "refine": refine, "depth": depth,
             "reduce": reduce}
    options = judge_options(given, name, CqoptError)
    catalog = as_catalog(catalog)
    workload = as_workload(workload)
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
        charts = build_local(specs, catalog, progress=progress, settings=options)
    else:
        from cqopt.spark.chart_build import build_spark
        from cqopt.spark.session import running_session

        with running_session(master, progress=progress) as spark:
            charts = build_spark(specs, catalog, spark=spark, progress=progress,
                                 settings=options)
            extra["master"] = spark.sparkContext.master
    if out is not None:
        write_chart_set(out, charts, catalog, force=force, engine=engine, extra=extra)
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
        computed, _ = trace_statistics(chosen, catalog, paths, {}, None, master, progress,
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
