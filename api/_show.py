"""``show``: a query's plan diagram and its plans' trees; what ``cqopt show`` writes and
prints."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from cqopt.api._common import Name, PathLike, bare
from cqopt.charts.settings import setting_label
from cqopt.errors import CqoptError

if TYPE_CHECKING:
    from cqopt.charts.lookup import ChartSet, QueryChart

DIAGRAM_SUFFIXES = (".png", ".svg", ".pdf")


@dataclass(frozen=True)
class Shown:
    """What :func:`show` made: the plans' trees (asked for) and the diagram's path (if
    written)."""

    plans: str | None = None
    path: Path | None = None


def show(charts: PathLike | ChartSet, query: str, out: PathLike | None = None, *,
         at: Mapping[str, float] | None = None, plans: bool = False,
         name: Name = setting_label) -> Shown:
    """Draw a query's plan diagram, and/or write out its plans' trees.

    Every region is coloured by its plan, the plans numbered P1..Pn by their
    share of the chart's area; a chart of 3 or more axes is drawn as a 2-D
    slice, the title saying which and why.

    Parameters
    ----------
    charts : path or ChartSet
        The chart set, or one loaded.
    query : str
        The query's name.
    out : path, optional
        The image to write (.png, .svg or .pdf); an existing file is replaced
        only if cqopt wrote it.
    at : mapping of str to float, optional
        For 3+ axes: the value of an axis beyond the first two to slice at.
    plans : bool
        Also give each plan's number, share of the chart and tree
        (:func:`plans_text`), numbered as the diagram's legend numbers them.
    name : callable
        ``name(parameter, value)`` names a parameter in messages.

    Returns
    -------
    Shown
        The plans' text (with ``plans``) and the diagram's path (with ``out``).

    Raises
    ------
    CqoptError
        Neither ``out`` nor ``plans``, another image type, a file cqopt did not
        write, an unknown query, an axis not to slice.

    Examples
    --------
    >>> import cqopt, cqopt.api, tempfile
    >>> from cqopt.examples import example
    >>> out = tempfile.mkdtemp() + "/charts"
    >>> _ = cqopt.build(example("dec-pkt.toml"), example("workload.toml"), out, k=4,
    ...                 engine="local", progress=False)
    >>> print(cqopt.api.show(out, "Q1", plans=True).plans.splitlines()[0])
    P1   75.0% of the chart  TCP[πσ]
    """
    import cqopt.charts as chart_sets
    from cqopt.charts.diagram import plan_diagram  # matplotlib: missing, said first

    if out is None and not plans:
        raise CqoptError(f"show: give {name('out', 'FILE.png')} for the diagram, "
                         f"{bare(name, 'plans')} for the plans' trees, or both")
    if out is not None and Path(out).suffix.lower() not in DIAGRAM_SUFFIXES:
        raise CqoptError(f"{name('out', out)}: the diagram is written as .png, .svg or .pdf")
    if out is not None:
        from cqopt.owned_file import check_owned_target

        check_owned_target(out)  # before any work: an image of cqopt's, or a new one
    chart_set = charts if isinstance(charts, chart_sets.ChartSet) else chart_sets.load(charts)
    chart = chart_set[query]
    at = dict(at or {})
    sliced = [a.statistic for a in chart.spec.axes[2:]]
    for stat in at:
        if stat not in sliced:
            raise CqoptError(f"{name('at', stat)}: not an axis to slice; the chart of {query} "
                             f"has {', '.join(a.statistic for a in chart.spec.axes)}"
                             + (f", sliced along {', '.join(sliced)}" if sliced else
                                ", two axes or fewer: nothing to slice"))
    text = plans_text(chart) if plans else None
    return Shown(text, None if out is None else plan_diagram(chart, out, at=at))


def plans_text(chart: QueryChart) -> str:
    """Every plan that wins somewhere, P1 first, with its share of the chart and its tree,
    numbered as the diagram's legend numbers them."""
    from cqopt.charts.diagram import plan_numbers

    blocks = []
    numbered = plan_numbers(chart)
    for n, (index, share) in enumerate(numbered, start=1):
        plan = chart.plans[index]
        head = f"P{n}  {share:6.1%} of the chart  {plan.id}"
        blocks.append(head + "\n" + "\n".join("    " + line
                                               for line in plan.explain().splitlines()))
    idle = len(chart.plans) - len(numbered)
    if idle:
        blocks.append(f"({idle} other candidate plan{'s' if idle > 1 else ''} win"
                      f"{'' if idle > 1 else 's'} nowhere in the chart)")
    return "\n\n".join(blocks)
