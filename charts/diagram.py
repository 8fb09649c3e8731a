"""Plan diagrams, in the manner of Picasso's: every region coloured by its plan.

Axis 0 of the chart runs along x and axis 1 along y, labelled with the
statistic's name and unit. As in Picasso, the plans that win somewhere are
numbered P1…Pn by their share of the chart's area, largest first
(:func:`plan_numbers`), and the legend gives each number with its share and
plan id; the title gives the model, weights and k, every statistic the chart
holds fixed (e.g. ``jsel.SF.TCP = 0.001``) and which slices are drawn and why.
A chart of three or more axes is drawn as 2-D slices at chosen regions of the
other axes (:func:`choose_slices`: the ones given, or the ones an overlay's
points visit most, or a few evenly spaced regions of axis 2 and the middle
region of the rest). A one-axis chart is a strip. An optional overlay draws a
path of statistics (e.g. the estimates of a replay) over the diagram, on each
slice only the points that fall in that slice's regions. A refined chart
(:mod:`cqopt.charts.refine`) is drawn with the outline of every region it
stores; a reduced chart's title gives its λ.

Only this module and the reports import matplotlib; the run-time API does not.

>>> import numpy as np
>>> from types import SimpleNamespace
>>> chart = SimpleNamespace(plan_index=np.array([[2, 2], [2, 0]]))
>>> plan_numbers(chart)  # plan 2 covers 3 of 4 cells: P1; plan 0: P2; plan 1 wins nowhere
[(2, 0.75), (0, 0.25)]
"""

from __future__ import annotations

import io
import itertools
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from cqopt.optimizer.query.statistics import split_name
from cqopt.owned_file import check_owned_target, write_owned

UNITS = {"rate": "tuples/s", "sel": "fraction passing", "jsel": "fraction of the product"}
MAX_SLICES = 4
LEGEND_ID_CHARS = 40  # a longer plan id is cut in the legend; `cqopt show --plans` has it whole


FONT_SIZE = 10.0  # points, a one-column diagram's text
TWO_COLUMN_SCALE = 1.4  # a two-column diagram's, relative


def axis_label(statistic: str) -> str:
    return f"{statistic} ({UNITS[split_name(statistic)[0]]})"


def plan_colours(n: int) -> list:
    """Distinct colours for n plans, stable by plan index."""
    from matplotlib import colormaps

    cmap = colormaps["tab10" if n <= 10 else "tab20"]
    return [cmap(i % cmap.N) for i in range(n)]


def plan_numbers(chart) -> list[tuple[int, float]]:
    """``(plan index, share of the chart's area)`` of every plan that wins somewhere,
    largest share first (ties by plan index): entry ``i`` is plan ``P{i+1}``.

    Every cell of the lookup index covers the same area (a refined chart's index
    is at its finest level), so a plan's share is its share of the cells.

    Parameters
    ----------
    chart : QueryChart
        A loaded chart (only its ``plan_index`` is read).

    Returns
    -------
    list of (int, float)
        The plans Picasso would number, P1 first.

    Examples
    --------
    >>> from types import SimpleNamespace
    >>> plan_numbers(SimpleNamespace(plan_index=np.array([0, 1, 1, 0, 3])))
    [(0, 0.4), (1, 0.4), (3, 0.2)]
    """
    index = np.asarray(chart.plan_index).ravel()
    plans, counts = np.unique(index, return_counts=True)
    order = np.lexsort((plans, -counts))
    return [(int(plans[i]), float(counts[i] / index.size)) for i in order]


def plan_label(number: int, share: float, plan_id: str) -> str:
    """``P3 (41.2%) TCP⋈UDP⋈SF``, the id cut to :data:`LEGEND_ID_CHARS`."""
    shown = plan_id if len(plan_id) <= LEGEND_ID_CHARS else plan_id[:LEGEND_ID_CHARS - 1] + "…"
    return f"P{number} ({share:.1%}) {shown}"


def fixed_text(spec) -> str:
    """The statistics the chart holds fixed, e.g. ``jsel.SF.TCP = 0.001``; '' if none."""
    return ", ".join(f"{name} = {value:g}" for name, value in sorted(spec.fixed.items()))


def choose_slices(chart, at: Mapping[str, float] | None = None,
                  overlay: Mapping[str, Sequence[float]] | None = None
                  ) -> tuple[list[dict[str, int]], str]:
    """The cells of axes 2.. at which to draw 2-D slices, and why those, in words.

    A value in ``at`` picks that statistic's region. Otherwise, with an
    ``overlay`` (values per statistic, e.g. a replay's estimates), axis 2 is
    drawn at the :data:`MAX_SLICES` regions its points visit most and every
    further axis at its most visited region; without one, at
    :data:`MAX_SLICES` evenly spaced regions, further axes at their middle.

    Parameters
    ----------
    chart : QueryChart
    at : mapping of str to float, optional
        A value for some axes beyond the first two (``cqopt show --stat``).
    overlay : mapping of str to sequence of float, optional
        Points to be drawn over the diagram, one sequence per axis.

    Returns
    -------
    points : list of dict
        Per slice, the region index of every axis beyond the first two.
    note : str
        Which slices these are and why ('' for a chart of two axes or fewer).

    Examples
    --------
    >>> from types import SimpleNamespace
    >>> from cqopt.charts.spec import Axis
    >>> axes = tuple(Axis(f"rate.{s}", 0.0, 100.0, 10) for s in "ABC")
    >>> chart = SimpleNamespace(spec=SimpleNamespace(axes=axes))
    >>> choose_slices(chart)
    ([{'rate.C': 0}, {'rate.C': 3}, {'rate.C': 6}, {'rate.C': 9}], '4 of 10 slices of rate.C, evenly spaced (pick one with --stat rate.C=VALUE)')
    >>> choose_slices(chart, overlay={"rate.C": [55, 56, 57, 12]})
    ([{'rate.C': 1}, {'rate.C': 5}], '2 of 10 slices of rate.C: every one the path visits')
    """
    rest = chart.spec.axes[2:]
    if not rest:
        return [{}], ""
    choices, notes = [], []
    for i, axis in enumerate(rest):
        name = axis.statistic
        if at and name in at:
            idx, _ = axis.cells(np.array([at[name]], dtype=float))
            choices.append([int(idx[0])])
            notes.append(f"{name} = {at[name]:g} (given)")
            continue
        visits = None
        if overlay is not None and name in overlay:
            values = np.asarray(overlay[name], dtype=float)
            values = values[np.isfinite(values)]
            if len(values):
                visits = np.bincount(axis.cells(values)[0], minlength=axis.k)
        if i == 0:
            if visits is not None:
                visited = np.flatnonzero(visits)
                top = sorted(visited[np.argsort(-visits[visited], kind="stable")]
                             [:MAX_SLICES].tolist())
                choices.append(top)
                share = visits[top].sum() / visits.sum()
                notes.append(f"{len(top)} of {axis.k} slices of {name}: " + (
                    "every one the path visits" if len(top) == len(visited) else
                    f"the ones the path visits most ({share:.0%} of its points)"))
            else:
                n = min(MAX_SLICES, axis.k)
                choices.append(sorted({int(round(j)) for j in np.linspace(0, axis.k - 1, n)}))
                notes.append(f"{len(choices[-1])} of {axis.k} slices of {name}, evenly spaced"
                             + (f" (pick one with --stat {name}=VALUE)"
                                if len(choices[-1]) < axis.k else ""))
        elif visits is not None:
            choices.append([int(np.argmax(visits))])
            notes.append(f"{name} at the region the path visits most")
        else:
            choices.append([axis.k // 2])
            notes.append(f"{name} at its middle region")
    points = [dict(zip((a.statistic for a in rest), combo))
              for combo in itertools.product(*choices)]
    return points, "; ".join(notes)


def slice_points(chart, at: Mapping[str, float] | None = None) -> list[dict[str, int]]:
    """The cells of axes 2.. at which to draw 2-D slices (:func:`choose_slices`'s)."""
    return choose_slices(chart, at)[0]


def _draw_leaves(ax, chart, point: Mapping[str, int]) -> None:
    """Outline a refined chart's regions that meet this 2-D slice (Picasso draws them)."""
    from matplotlib.collections import PolyCollection

    spec, leaves = chart.spec, chart.leaves
    lo, side = leaves.bounds()
    meets = np.ones(len(side), dtype=bool)
    for i, axis in enumerate(spec.axes[2:], start=2):
        cell = point[axis.statistic]
        meets &= (lo[:, i] <= cell) & (cell < lo[:, i] + side)
    x, width_x = spec.axes[0], (spec.axes[0].hi - spec.axes[0].lo) / spec.axes[0].k
    x0 = x.lo + lo[meets, 0] * width_x
    x1 = x0 + side[meets] * width_x
    if len(spec.axes) > 1:
        y = spec.axes[1]
        width_y = (y.hi - y.lo) / y.k
        y0 = y.lo + lo[meets, 1] * width_y
        y1 = y0 + side[meets] * width_y
    else:
        y0, y1 = np.zeros(len(x0)), np.ones(len(x0))
    boxes = np.stack([np.stack([x0, y0], -1), np.stack([x1, y0], -1),
                      np.stack([x1, y1], -1), np.stack([x0, y1], -1)], axis=1)
    ax.add_collection(PolyCollection(boxes, facecolors="none", edgecolors="black",
                                     linewidths=0.3, alpha=0.6))


def plan_diagram(chart, out: str | Path, *, at: Mapping[str, float] | None = None,
                 overlay: Mapping[str, Sequence[float]] | None = None,
                 title: str | None = None, dpi: int = 100) -> Path:
    """Draw ``chart`` to ``out`` (PNG, SVG or PDF, by its suffix).

    Parameters
    ----------
    chart : QueryChart
        A loaded chart (:class:`~cqopt.charts.lookup.QueryChart`).
    out : path
        The image to write; its folder must exist, and an existing file there is
        replaced only if cqopt wrote it (:func:`cqopt.owned_file.check_owned_target`).
    at : mapping of str to float, optional
        A value of some axes beyond the first two: the slice to draw there.
    overlay : mapping of str to sequence of float, optional
        A path of points, one sequence per axis of the chart (e.g. a replay's
        estimates): drawn on each slice through the points in its regions only.
    title : str, optional
        The first line of the title (default: the query, model, weights and k).
    dpi : int
        Resolution of a PNG.

    Returns
    -------
    Path
        ``out``.

    Examples
    --------
    >>> import tempfile
    >>> from types import SimpleNamespace
    >>> from cqopt.charts.lookup import QueryChart
    >>> from cqopt.charts.spec import Axis, ChartSpec
    >>> spec = ChartSpec("q", "x", (Axis("sel.S", 0.0, 1.0, 4),))
    >>> plans = [SimpleNamespace(id="A"), SimpleNamespace(id="B")]
    >>> chart = QueryChart(spec, plans, np.array([0, 0, 0, 1]), None)
    >>> plan_diagram(chart, Path(tempfile.mkdtemp()) / "q.png").name
    'q.png'
    """
    out = check_owned_target(out)
    spec, plans = chart.spec, chart.plans
    colours = plan_colours(len(plans))
    numbered = plan_numbers(chart)
    number = {index: n for n, (index, _) in enumerate(numbered, start=1)}
    slices, note = choose_slices(chart, at, overlay)
    cols = min(len(slices), 2)
    rows = -(-len(slices) // cols)
    # Two columns make a figure about 1040 px wide, which a report shows at 800 px and
    # less: its text is drawn larger, so that it stays readable (11 px or more) there.
    size = FONT_SIZE * (1.0 if cols == 1 else TWO_COLUMN_SCALE)
    fig = Figure(figsize=(5.0 * cols + 0.4, 3.9 * rows + 0.28 * len(numbered) / cols + 1.3),
                 layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False).ravel()
    used: set[int] = set()
    x_axis = spec.axes[0]
    y_axis = spec.axes[1] if len(spec.axes) > 1 else None
    by_name = {a.statistic: a for a in spec.axes}
    path = None
    if overlay is not None:
        path = {a.statistic: np.asarray(overlay[a.statistic], dtype=float) for a in spec.axes}
    for ax, point in zip(axes, slices):
        index = tuple(slice(None) if i < 2 else point[a.statistic]
                      for i, a in enumerate(spec.axes))
        grid = chart.plan_index[index]
        if grid.ndim == 1:
            grid = grid[:, None]
        used |= set(np.unique(grid).tolist())
        rgb = np.array(colours)[grid.T]  # rows are y
        y_edges = y_axis.edges() if y_axis else np.array([0.0, 1.0])
        ax.pcolormesh(x_axis.edges(), y_edges, rgb[..., :3], shading="flat")
        if getattr(chart, "leaves", None) is not None:
            _draw_leaves(ax, chart, point)
        ax.tick_params(labelsize=size)
        ax.set_xlabel(axis_label(x_axis.statistic), fontsize=size)
        if y_axis:
            ax.set_ylabel(axis_label(y_axis.statistic), fontsize=size)
        else:
            ax.set_yticks([])
        where = ", ".join(f"{s} = {by_name[s].centroids()[i]:.4g}" for s, i in point.items())
        if path is not None and len(path[x_axis.statistic]):
            where += _draw_path(ax, path, point, by_name, x_axis, y_axis)
        if where:
            ax.set_title(where, fontsize=size * 0.9)
    for ax in axes[len(slices):]:
        ax.set_visible(False)
    handles = [Patch(color=colours[i], label=plan_label(number[i], share, plans[i].id))
               for i, share in numbered if i in used]
    fig.legend(handles=handles, loc="outside lower center", ncols=min(cols + 1, len(handles)),
               title="plan (share of the chart's area)", fontsize=size * 0.8,
               title_fontsize=size * 0.9)
    weights = ", ".join(f"{w:g}" for w in spec.weights)
    leaves = getattr(chart, "leaves", None)
    shape = f"k = {x_axis.k}" if leaves is None else \
        f"refined: {len(leaves.plan)} regions, depth {leaves.depth}"
    reduction = getattr(chart, "reduction", None)
    if reduction:
        shape += f", reduced at λ = {reduction['lambda']:g}"
    lines = [title or f"{spec.name}: {spec.model.upper()} model, weights ({weights}), {shape}"]
    if title:
        lines.append(f"{spec.model.upper()} model, weights ({weights}), {shape}")
    if spec.fixed:
        lines.append(f"fixed: {fixed_text(spec)}")
    if note:
        lines.append(f"shown: {note}")
    fig.suptitle("\n".join(lines), fontsize=size)
    image = io.BytesIO()
    fig.savefig(image, format=out.suffix.lower().lstrip(".") or "png", dpi=dpi)
    return write_owned(out, image.getvalue())


def slice_members(axes: Mapping[str, object], point: Mapping[str, int],
                  path: Mapping[str, Sequence[float]]) -> np.ndarray:
    """Which points of ``path`` lie in the slice ``point`` (their regions of axes 2..).

    Parameters
    ----------
    axes : mapping of str to Axis
        The chart's axes by statistic.
    point : mapping of str to int
        A slice: the region of every axis beyond the first two.
    path : mapping of str to sequence of float
        The points, one sequence per axis.

    Returns
    -------
    ndarray of bool
        One per point; all True for a chart of two axes or fewer.

    Examples
    --------
    >>> from cqopt.charts.spec import Axis
    >>> axes = {"rate.C": Axis("rate.C", 0.0, 100.0, 10)}
    >>> slice_members(axes, {"rate.C": 5}, {"rate.C": [55.0, 12.0, 59.9]}).tolist()
    [True, False, True]
    """
    n = len(next(iter(path.values())))
    here = np.ones(n, dtype=bool)
    for name, cell in point.items():
        here &= axes[name].cells(np.asarray(path[name], dtype=float))[0] == cell
    return here


def _draw_path(ax, path: Mapping[str, np.ndarray], point: Mapping[str, int], by_name,
               x_axis, y_axis) -> str:
    """Draw the path's points that fall in this slice's regions, broken where it leaves
    the slice; return ``, n of N points`` for the slice's title when not all are here."""
    n = len(path[x_axis.statistic])
    here = slice_members(by_name, point, path)
    xs = np.where(here, path[x_axis.statistic], np.nan)
    ys = np.where(here, path[y_axis.statistic], np.nan) if y_axis else np.where(here, 0.5, np.nan)
    ax.plot(xs, ys, color="black", lw=0.8, alpha=0.8, marker=".", ms=3)
    ax.set_xlim(x_axis.lo, x_axis.hi)
    if y_axis:
        ax.set_ylim(y_axis.lo, y_axis.hi)
    return f" ({int(here.sum())} of {n} points)" if point else ""
