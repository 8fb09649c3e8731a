"""The σ/π orders of one stream's own operators, and the columns its projection keeps.

A plan (:mod:`cqopt.optimizer.plans.builder`) puts each stream's own operators
right above its source in one of these orders, bottom-up; which order each
plan takes is the decision of the pushdown rule
(:mod:`cqopt.optimizer.rules.pushdown`, heuristic 2 of the OM paper). A
stream gets a projection only when the columns it needs above (its output, aggregate,
GROUP BY and join columns: ``query.required_columns``) are a strict subset of
its columns. With a selection too, both orders are candidates: σ→π (the
projection keeps the columns needed above) and π→σ (it also keeps the columns
the selection reads), the latter only when that is still a strict subset.

>>> from cqopt.catalog import Catalog
>>> from cqopt.optimizer.query.logical import parse_query
>>> cat = Catalog.from_dict({"streams": {"S": {"rate": [1, 10],
...     "columns": {"a": "int", "b": "int", "c": "int"}}}})
>>> q = parse_query("SELECT S.a FROM S WHERE S.b = 1 WINDOW [1]", cat)
>>> stream_orders(q, "S"), projection_columns(q, "S", below_selection=True)
(('σπ', 'πσ'), ('a', 'b'))
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cqopt.optimizer.plans.plan import PROJECT, SELECT

if TYPE_CHECKING:
    from cqopt.optimizer.query.logical import ContinuousQuery

SELECT_PROJECT = SELECT + PROJECT  # σ→π: select, then project
PROJECT_SELECT = PROJECT + SELECT  # π→σ: project, then select


def stream_orders(query: ContinuousQuery, stream: str) -> tuple[str, ...]:
    """The candidate orders of ``stream``'s own operators, bottom-up.

    ``("σπ", "πσ")`` when both orders are worth having, else one of ``("σπ",)``,
    ``("σ",)``, ``("π",)`` or ``("",)`` (the source alone).
    """
    everything = len(query.stream(stream).columns)
    project_above = len(query.required_columns(stream)) < everything
    selection = query.selections.get(stream)
    if selection is None:
        return (PROJECT,) if project_above else ("",)
    if not project_above:
        return (SELECT,)
    if len(projection_columns(query, stream, below_selection=True)) < everything:
        return SELECT_PROJECT, PROJECT_SELECT
    return (SELECT_PROJECT,)


def projection_columns(query: ContinuousQuery, stream: str,
                       below_selection: bool) -> tuple[str, ...]:
    """Columns a projection on ``stream`` keeps, in catalog order."""
    needed = set(query.required_columns(stream))
    if below_selection:
        needed |= set(query.selections[stream].columns_used)
    return tuple(c.name for c in query.stream(stream).columns if c.name in needed)
