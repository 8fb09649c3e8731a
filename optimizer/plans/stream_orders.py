"""Heuristic 2 of the OM paper (section 4.2): push selections and projections down.

Each stream's own operators sit right above its source. A stream gets a
projection only when the columns it needs above (its output, aggregate,
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

import itertools
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


def stream_order_combinations(query: ContinuousQuery) -> list[dict[str, str]]:
    """Every combination of per-stream orders; the first stream varies slowest."""
    names = query.stream_names
    choices = [stream_orders(query, s) for s in names]
    return [dict(zip(names, combo)) for combo in itertools.product(*choices)]


def projection_columns(query: ContinuousQuery, stream: str,
                       below_selection: bool) -> tuple[str, ...]:
    """Columns a projection on ``stream`` keeps, in catalog order."""
    needed = set(query.required_columns(stream))
    if below_selection:
        needed |= set(query.selections[stream].columns_used)
    return tuple(c.name for c in query.stream(stream).columns if c.name in needed)
