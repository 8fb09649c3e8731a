"""``explain``: a query's logical form, the statistics its cost depends on, and every
candidate plan costed, the cheapest marked; what ``cqopt explain`` prints.

Each query is costed as its chart is (a workload's query at its chart's model,
weights and fixed statistics), at the statistics given, else the chart's, else
the defaults, each said where it came from. With ``analyze``, every plan runs
on one round of the traces in this process (the reference executor) and each
operator's actual rows stand beside its estimate.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cqopt.api._common import Name, PathLike, as_catalog, as_workload, bare
from cqopt.api._traces import trace_paths
from cqopt.catalog import Catalog
from cqopt.charts.settings import ChartSettings, judge_options, setting_label
from cqopt.charts.workload import Workload
from cqopt.costmodel import Utility, make_model, plan_utilities
from cqopt.errors import CqoptError, did_you_mean
from cqopt.optimizer.plans.sql import plan_sql
from cqopt.optimizer.query.logical import ContinuousQuery, parse_query
from cqopt.optimizer.query.statistics import DEFAULT_SELECTIVITY, default_value
from cqopt.optimizer.rules.enumerate import enumerate_plans, rule_names, rules_without


@dataclass(frozen=True)
class ExplainedQuery:
    """One query explained: its name, the parsed query, whether a workload's chart costs
    it, and ``record``, everything found (what ``explain --json`` prints)."""

    name: str
    query: ContinuousQuery
    charted: bool
    record: dict[str, Any]


@dataclass(frozen=True)
class Explanation:
    """What :func:`explain` found: each query explained, and how it was asked.

    :meth:`to_dict` is the JSON ``cqopt explain --json`` prints, :meth:`text`
    the text ``cqopt explain`` prints.
    """

    queries: tuple[ExplainedQuery, ...]
    without: tuple[str, ...] = ()
    analyze: str | None = None
    round: int | None = None
    sql_out: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """One query's record, or ``{"queries": [...]}`` for several."""
        records = [q.record for q in self.queries]
        return records[0] if len(records) == 1 else {"queries": records}

    def text(self) -> str:
        """Each query's logical form, statistics and costed plans, as the console says them."""
        return "\n\n".join(self._query_text(q) for q in self.queries)

    __str__ = text

    def _query_text(self, explained: ExplainedQuery) -> str:
        record, query = explained.record, explained.query
        stats = ", ".join(f"{s}={v['value']:g}" + ("" if v["source"] == "given"
                                                   else f" ({v['source']})")
                          for s, v in record["statistics"].items())
        lines = [f"== {explained.name}", query.sql, "", query.describe(), ""]
        if self.without:
            lines.append(f"Rules: {', '.join(record['rules'])} (without "
                         f"{', '.join(self.without)})")
        w_r, w_m, w_c = record["weights"]
        weights = (w_r, w_m) + ((w_c,) if w_c else ())
        lines.append(f"Costed with the {record['model'].upper()} model, weights "
                     f"({', '.join(f'{w:g}' for w in weights)}), at {stats}")
        if explained.charted and any(v["source"] == "chart"
                                     for v in record["statistics"].values()):
            lines.append(f"  (chart: the value the workload's chart of {explained.name} "
                         "fixes, or the middle of its axis)")
        if self.analyze is not None:
            lines.append(f"  (round {self.round or 0}: measured on that round of the traces "
                         f"in {self.analyze}; each operator's actual rows are its output on "
                         "it, by the reference executor)")
        lines += ["  (defaults: the middle of the catalog's range for a rate, "
                  f"{DEFAULT_SELECTIVITY} for a selectivity, 0 for a contradiction's)", ""]
        if record["chosen"] is None:
            lines.append("Every plan costs infinitely much here (the query emits nothing): "
                         "none is cheaper.")
        lines.append(f"Candidate plans ({len(record['plans'])}):")
        for number, plan in enumerate(record["plans"], 1):
            c = plan["cost"]
            mark = "  <- cheapest" if plan["id"] == record["chosen"] else ""
            lines.append(f"  {number}. {plan['id']}  rate {c['rate']:.4g}/s  memory "
                         f"{c['memory']:.4g} B  cpu {c['cpu']:.3g} s/s  utility "
                         f"{c['utility']:.6g}{mark}")
            lines.append(textwrap.indent(plan["tree"], "     "))
            if "sql" in plan:
                lines += [f"     SQL ({self.sql_out}):", textwrap.indent(plan["sql"], "       ")]
        return "\n".join(lines)


def explain(catalog: PathLike | Catalog, *, sql: str | None = None,
            workload: PathLike | Workload | None = None, query: str | None = None,
            stats: Mapping[str, float] | None = None, model: str | None = None,
            weights: Sequence[float] | None = None, without: Sequence[str] = (),
            sql_out: str | None = None, analyze: PathLike | None = None,
            round: int | None = None, name: Name = setting_label) -> Explanation:
    """Explain a query (``sql``) or a workload's queries: logical form, statistics and every
    candidate plan costed, the cheapest marked.

    Parameters
    ----------
    catalog : path or Catalog
        The stream catalog (TOML), or one loaded.
    sql : str, optional
        A CQL query text; or else ``workload``.
    workload : path or Workload, optional
        A workload of named queries, each costed as its chart is (its model, weights
        and fixed statistics).
    query : str, optional
        With ``workload``: the one query to explain (default every one).
    stats : mapping of str to float, optional
        Statistics to cost the plans at (``{"rate.TCP": 500}``); the others come
        from the chart, else their defaults, each said where from.
    model : str, optional
        The cost model (default the workload's, else ``om``).
    weights : sequence of float, optional
        The utility weights ``(w_r, w_m[, w_c])``.
    without : sequence of str
        Rules to enumerate without, for an ablation
        (:func:`cqopt.optimizer.rules.enumerate.rule_names`).
    sql_out : str, optional
        Also write each plan as SQL of this sqlglot dialect, shaped like the plan.
    analyze : path, optional
        A folder of traces (``STREAM.csv``, ...): every plan runs on one round of
        them in this process, costed at its measured statistics (needs pandas).
    round : int, optional
        With ``analyze``: the round (default 0, the first).
    name : callable
        ``name(parameter, value)`` names a parameter in messages.

    Returns
    -------
    Explanation
        ``text()`` as ``cqopt explain`` prints it, ``to_dict()`` as ``--json`` does.

    Raises
    ------
    CqoptError
        A bad query, workload, statistic, setting, rule or trace folder.

    Examples
    --------
    >>> import cqopt.api
    >>> from cqopt.examples import example
    >>> found = cqopt.api.explain(example("dec-pkt.toml"), workload=example("workload.toml"),
    ...                           query="Q1", stats={"sel.TCP": 0.1, "rate.TCP": 450.0})
    >>> [plan["id"] for plan in found.to_dict()["plans"]], found.to_dict()["chosen"]
    (['TCP[σπ]', 'TCP[πσ]'], 'TCP[σπ]')
    >>> print(found.text().splitlines()[0])
    == Q1
    """
    rules = rules_without(list(without))
    catalog = as_catalog(catalog)
    options = judge_options({"model": model, "weights": weights}, name, CqoptError)
    queries = _queries(catalog, sql, workload, query, options, name)
    if round is not None and analyze is None:
        raise CqoptError(f"{name('round', round)}: a round of {bare(name, 'analyze')} TRACES; "
                         "give the traces")
    paths = None
    if analyze is not None:
        if stats:
            raise CqoptError(f"{bare(name, 'stats')} with {bare(name, 'analyze')}: the plans "
                             "are costed at the round's measured statistics; leave out one of "
                             "them")
        paths = trace_paths(catalog, None, analyze, lambda _, value: name("analyze", value))
    given = dict(stats or {})
    unused = set(given) - {s for _, q, _ in queries for s in q.statistics}
    if unused:
        known = list(dict.fromkeys(s for _, q, _ in queries for s in q.statistics))
        first = sorted(unused)[0]
        raise CqoptError(f"{name('stats', ', '.join(sorted(unused)))}: no query here depends "
                         f"on it (the statistics are {', '.join(known)})"
                         f"{did_you_mean(first, known)}")
    explained = tuple(
        ExplainedQuery(query_name, q, spec is not None,
                       _explained(q, spec, catalog, options, rules, given, paths, round,
                                  sql_out, query_name))
        for query_name, q, spec in queries)
    return Explanation(explained, tuple(without), None if analyze is None else str(analyze),
                       round, sql_out)


def _queries(catalog: Catalog, sql: str | None, workload: PathLike | Workload | None,
             query: str | None, options: dict[str, Any], name: Name
             ) -> list[tuple[str, ContinuousQuery, Any]]:
    """The (name, query, chart spec) triples to explain: ``sql`` (no spec), or a workload's
    queries with the chart spec each is built with (``options`` over the file's settings)."""
    if (sql is None) == (workload is None):
        raise CqoptError(f"explain: give {bare(name, 'sql')} (a query text) or "
                         f"{bare(name, 'workload')} (a workload file), one of them")
    if sql is not None:
        if query:
            raise CqoptError(f"{bare(name, 'query')} names a query of "
                             f"{bare(name, 'workload')}; with {bare(name, 'sql')} leave it out")
        return [("query", parse_query(sql, catalog), None)]
    from cqopt.charts.spec import workload_specs

    workload = as_workload(workload)
    if query:
        workload.query(query)  # an unknown name, with did-you-mean
    try:
        specs = workload_specs(workload, catalog, options)
    except CqoptError as err:
        raise CqoptError(f"{workload.source}: {err}") from None
    return [(spec.name, q, spec) for spec, q in specs if not query or spec.name == query]


def _statistics(query: ContinuousQuery, given: Mapping[str, float], catalog: Catalog,
                spec=None) -> dict[str, tuple[float, str]]:
    """Every statistic of ``query``: (value, where it came from: ``given``, ``chart`` (the
    workload's chart: a fixed value, or the middle of an axis) or ``default``)."""
    chart = {} if spec is None else {**spec.centre(), **spec.fixed}
    return {name: (given[name], "given") if name in given
            else (chart[name], "chart") if name in chart
            else (default_value(name, catalog, query), "default") for name in query.statistics}


def _measured(query: ContinuousQuery, spec, catalog: Catalog, paths: Mapping[str, str],
              round: int | None) -> tuple[dict[str, tuple[float, str]], Any, float]:
    """The round's statistics as measured on its tuples (the rest as :func:`_statistics`
    has them), the round's tuples of each stream, and its length in seconds."""
    from cqopt.costmodel.validation import window_statistics
    from cqopt.replay.round_window import round_windows

    window_s = query.round_seconds()
    windows = round_windows(query, paths, round or 0, window_s)
    measured = window_statistics(query, windows, window_s)
    label = f"round {round or 0}"
    stats = {s: (measured[s], label) if math.isfinite(measured.get(s, math.nan))
             else (value, source) for s, (value, source)
             in _statistics(query, {}, catalog, spec).items()}
    return stats, windows, window_s


def _explained(query: ContinuousQuery, spec, catalog: Catalog, options: dict[str, Any],
               rules, given: Mapping[str, float], paths: Mapping[str, str] | None,
               round: int | None, sql_out: str | None, query_name: str) -> dict[str, Any]:
    """One query's record: its statistics, every candidate plan costed, the cheapest."""
    # A workload's query is costed as its chart is: its model, weights and statistics.
    settings = (ChartSettings.from_values(options) if spec is None else
                ChartSettings(model=spec.model, weights=spec.weights,
                              memory_unit=spec.memory_unit))
    model = make_model(settings.model, catalog, settings.memory_unit)
    utility = Utility.from_weights(settings.weights)
    windows = window_s = None
    if paths is not None:  # the round's tuples and its measured statistics
        stats, windows, window_s = _measured(query, spec, catalog, paths, round)
    else:
        stats = _statistics(query, given, catalog, spec)
    values = {s: value for s, (value, _) in stats.items()}
    # Past the exhaustive limit, the local search orders joins by this model at these stats.
    # A model that prices join strategies keeps those cheapest at these statistics.
    strategy_cost = (lambda ps: plan_utilities(model, utility, ps, values)[:, None]) \
        if getattr(model, "prices_join_strategies", False) else None
    plans = enumerate_plans(query, catalog=catalog, rules=rules,
                            cost=lambda p: float(plan_utilities(model, utility, [p],
                                                                values)[0]),
                            strategy_cost=strategy_cost)
    costed = _costs(plans, values, model, utility)
    costs = [totals for totals, _ in costed]
    best = min(range(len(plans)), key=lambda i: (costs[i]["utility"], plans[i].id))
    # With no output at all (a contradiction, an empty stream) no plan is cheaper.
    chosen = plans[best] if math.isfinite(costs[best]["utility"]) else None
    return {"name": query_name, "query": query.to_dict(), "model": model.name,
            "rules": list(rule_names(rules)),
            "weights": [utility.w_r, utility.w_m, utility.w_c],
            "statistics": {s: {"value": v, "default": d == "default", "source": d}
                           for s, (v, d) in stats.items()},
            "plans": [_plan_record(p, totals, cost, query, windows, window_s, sql_out)
                      for p, (totals, cost) in zip(plans, costed)],
            "chosen": chosen.id if chosen else None}


def _costs(plans, values: Mapping[str, float], model, utility
           ) -> list[tuple[dict[str, float], Any]]:
    """Each plan's totals and its cost (per operator too), costed once."""
    # At one point: the generated scalar path, and one utility call over all plans.
    utilities = plan_utilities(model, utility, plans, values)
    out = []
    for plan, plan_utility in zip(plans, utilities):
        cost = model.cost(plan, values)
        out.append(({"rate": float(cost.rate), "memory": float(cost.memory),
                     "cpu": float(cost.cpu), "utility": float(plan_utility)}, cost))
    return out


def _operator_notes(cost, window_s: float | None, run=None) -> dict[str, str]:
    """Each operator's estimates (and, from ``run``, the rows it emitted), for the tree."""
    notes = {}
    for key, op in cost.operators.items():
        text = (f"(rate {float(op.rate):.4g}/s, memory {float(op.memory):.4g} B, "
                f"cpu {float(op.cpu):.3g} s/s")
        if run is not None:
            text += (f"; rows estimated {float(op.rate) * window_s:.4g}, "
                     f"actual {run.operators[key].emitted}")
        notes[key] = text + ")"
    return notes


def _plan_record(plan, costs: dict[str, float], cost, query: ContinuousQuery, windows,
                 window_s: float | None, sql_out: str | None) -> dict[str, Any]:
    """One plan: its id, totals, per-operator estimates (``cost``; and, given a round's
    ``windows``, the rows each operator emitted on it) and its tree."""
    run = None
    if windows is not None:  # analyze: the reference executor needs pandas (an extra)
        from cqopt.costmodel.reference_executor import execute

        run = execute(plan, query, windows)
    operators = {key: {"rate": float(op.rate), "memory": float(op.memory),
                       "cpu": float(op.cpu),
                       **({"rows_estimated": float(op.rate) * window_s,
                           "rows_actual": run.operators[key].emitted} if run else {})}
                 for key, op in cost.operators.items()}
    return {"id": plan.id, "cost": costs, "operators": operators,
            "tree": plan.explain(_operator_notes(cost, window_s, run)),
            **({"sql": plan_sql(plan, sql_out, query=query)} if sql_out else {})}
