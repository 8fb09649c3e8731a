"""``choose``: the plan a chart set holds for given statistics; what ``cqopt choose`` prints."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cqopt.api._common import Name, PathLike, bare
from cqopt.catalog import Catalog
from cqopt.charts.settings import setting_label
from cqopt.errors import CqoptError

if TYPE_CHECKING:
    from cqopt.charts.lookup import ChartSet, Choice


@dataclass(frozen=True)
class Chosen:
    """The plan :func:`choose` found: the query, the chart's :class:`~cqopt.charts.Choice`
    (plan, cell, statistics clamped to the chart's edge) and, asked for, the plan as SQL."""

    query: str
    choice: Choice
    sql: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """What ``cqopt choose --json`` prints: query, plan, cell, clamped (and sql)."""
        return {"query": self.query, "plan": self.choice.plan_id, "cell": list(self.choice.cell),
                "clamped": list(self.choice.clamped),
                **({"sql": self.sql} if self.sql is not None else {})}

    def text(self) -> str:
        """The plan, its cell, what was clamped and its tree, as the console says them."""
        lines = [f"{self.query}: plan {self.choice.plan_id}, cell {self.choice.cell}"]
        if self.choice.clamped:
            lines.append(f"clamped to the chart's edge: {', '.join(self.choice.clamped)}")
        lines.append(self.choice.plan.explain())
        if self.sql is not None:
            lines.append(self.sql)
        return "\n".join(lines)

    __str__ = text


def choose(charts: PathLike | ChartSet, query: str, stats: Mapping[str, float] | None = None,
           *, catalog: PathLike | Catalog | None = None, allow_stale: bool = False,
           sql_out: str | None = None, warn: Callable[[str], None] | None = None,
           name: Name = setting_label) -> Chosen:
    """Look up the plan a chart set's chart of ``query`` holds for ``stats``.

    Values outside the chart are clamped to its edge (``Chosen.choice.clamped``);
    a statistic the chart fixes is warned about, a statistic the query does not
    have refused.

    Parameters
    ----------
    charts : path or ChartSet
        The chart set (:func:`build` writes one), or one loaded.
    query : str
        The query's name.
    stats : mapping of str to float, optional
        The statistics, one per chart axis (``{"rate.TCP": 500, "sel.TCP": 0.3}``).
    catalog : path or Catalog, optional
        Refuse charts built from a catalog with other costs (see ``allow_stale``).
    allow_stale : bool
        With ``catalog``: look up in charts of another catalog anyway, warned.
    sql_out : str, optional
        Also write the chosen plan as SQL of this sqlglot dialect.
    warn : callable, optional
        Called with each warning's line (stale charts, fixed statistics given);
        default :func:`warnings.warn`.
    name : callable
        ``name(parameter, value)`` names a parameter in messages.

    Returns
    -------
    Chosen
        ``text()`` as ``cqopt choose`` prints it, ``to_dict()`` as ``--json`` does.

    Raises
    ------
    CqoptError
        An unreadable or stale chart set, an unknown query or statistic.

    Examples
    --------
    >>> import cqopt, cqopt.api, tempfile
    >>> from cqopt.examples import example
    >>> out = tempfile.mkdtemp() + "/charts"
    >>> _ = cqopt.build(example("dec-pkt.toml"), example("workload.toml"), out, k=4,
    ...                 engine="local", progress=False)
    >>> chosen = cqopt.api.choose(out, "Q1", {"sel.TCP": 0.1, "rate.TCP": 5000.0})
    >>> chosen.to_dict()["clamped"]
    ['rate.TCP']
    """
    import cqopt.charts as chart_sets

    if allow_stale and catalog is None:
        raise CqoptError(f"{bare(name, 'allow_stale')} is given without {bare(name, 'catalog')}, "
                         f"which it modifies; give {bare(name, 'catalog')} too, or leave "
                         f"{bare(name, 'allow_stale')} out")
    warn = warn if warn is not None else (lambda line: warnings.warn(line, stacklevel=3))
    chart_set = charts if isinstance(charts, chart_sets.ChartSet) else chart_sets.load(charts)
    stats = dict(stats or {})
    if catalog is not None:
        chart_set.require_fresh(catalog, name("charts", charts),
                                allow_stale=f"pass {bare(name, 'allow_stale')} to look up anyway",
                                warn=warn if allow_stale else None)
    chart = chart_set[query]
    fixed = chart.check_statistics(stats)  # refuses a statistic the query does not have
    if fixed:
        warn(f"the chart of {query} does not use "
             + ", ".join(f"{s} (fixed at {chart.spec.fixed[s]:g})" for s in fixed))
    choice = chart_set.choose(query, stats)
    sql = None
    if sql_out is not None:
        from cqopt.optimizer.plans.sql import plan_sql
        from cqopt.optimizer.query.logical import parse_query

        # The chart set's own catalog: the query plans as it did when the charts were built.
        built = Catalog.from_dict(chart_set.manifest["catalog"], f"{charts} catalog")
        sql = plan_sql(choice.plan, sql_out, query=parse_query(chart.spec.sql, built))
    return Chosen(query, choice, sql)
