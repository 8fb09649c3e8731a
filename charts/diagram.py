"""Plan diagrams, in the manner of Picasso's: every region coloured by its plan.

Axis 0 of the chart runs along x and axis 1 along y, labelled with the
statistic's name and unit; a legend names every plan that appears. A chart of
three or more axes is drawn as 2-D slices at chosen values of the other axes
(by default a few evenly spaced regions of axis 2, the middle region of the
rest). A one-axis chart is a strip. An optional overlay draws a path of
statistics (e.g. the estimates of a replay) over the diagram. A refined
chart (:mod:`cqopt.charts.refine`) is drawn with the outline of every region
it stores; a reduced chart's title gives its λ.

Only this module and the reports import matplotlib; the run-time API does not.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from cqopt.optimizer.statistics import split_name
from cqopt.output import check_file_target

UNITS = {"rate": "tuples/s", "sel": "fraction passing", "jsel": "fraction of the product"}
MAX_SLICES = 4


def axis_label(statistic: str) -> str:
    return f"{statistic} ({UNITS[split_name(statistic)[0]]})"


def plan_colours(n: int) -> list:
    """Distinct colours for n plans, stable by plan index."""
    from matplotlib import colormaps

    cmap = colormaps["tab10" if n <= 10 else "tab20"]
    return [cmap(i % cmap.N) for i in range(n)]


def slice_points(chart, at: Mapping[str, float] | None = None) -> list[dict[str, int]]:
    """The cells of axes 2.. at which to draw 2-D slices."""
    rest = chart.spec.axes[2:]
    if not rest:
        return [{}]
    choices = []
    for i, axis in enumerate(rest):
        if at and axis.statistic in at:
            idx, _ = axis.cells(np.array([at[axis.statistic]]))
            choices.append([int(idx[0])])
        elif i == 0:
            n = min(MAX_SLICES, axis.k)
            choices.append(sorted({int(round(j)) for j in np.linspace(0, axis.k - 1, n)}))
        else:
            choices.append([axis.k // 2])
    return [dict(zip((a.statistic for a in rest), combo))
            for combo in itertools.product(*choices)]


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
                 overlay: Sequence[tuple[float, float]] | None = None,
                 title: str | None = None) -> Path:
    """Draw ``chart`` (a :class:`~cqopt.charts.lookup.QueryChart`) to ``out`` (PNG).

    The folder of ``out`` must exist: cqopt makes no folders for a file it is asked to
    write (:func:`cqopt.output.check_file_target`).
    """
    out = check_file_target(out)
    spec, plans = chart.spec, chart.plans
    colours = plan_colours(len(plans))
    slices = slice_points(chart, at)
    cols = min(len(slices), 2)
    rows = -(-len(slices) // cols)
    fig = Figure(figsize=(6.4 * cols, 4.6 * rows + 0.6 * len(plans) / 2 + 0.6),
                 layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False).ravel()
    used: set[int] = set()
    x_axis = spec.axes[0]
    y_axis = spec.axes[1] if len(spec.axes) > 1 else None
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
        ax.set_xlabel(axis_label(x_axis.statistic))
        if y_axis:
            ax.set_ylabel(axis_label(y_axis.statistic))
        else:
            ax.set_yticks([])
        if point:
            by_name = {a.statistic: a for a in spec.axes}
            where = ", ".join(f"{s} = {by_name[s].centroids()[i]:.4g}" for s, i in point.items())
            ax.set_title(where, fontsize=9)
        if overlay is not None and len(overlay):
            xy = np.asarray(overlay, dtype=float)
            ys = xy[:, 1] if y_axis else np.full(len(xy), 0.5)
            ax.plot(xy[:, 0], ys, color="black", lw=0.8, alpha=0.8, marker=".", ms=2)
            ax.set_xlim(x_axis.lo, x_axis.hi)
            if y_axis:
                ax.set_ylim(y_axis.lo, y_axis.hi)
    for ax in axes[len(slices):]:
        ax.set_visible(False)
    handles = [Patch(color=colours[i], label=plans[i].id) for i in sorted(used)]
    fig.legend(handles=handles, loc="outside lower center", ncols=min(3, len(handles)),
               title="plan", fontsize=9)
    weights = ", ".join(f"{w:g}" for w in spec.weights)
    leaves = getattr(chart, "leaves", None)
    shape = f"k = {x_axis.k}" if leaves is None else \
        f"refined: {len(leaves.plan)} regions, depth {leaves.depth}"
    reduction = getattr(chart, "reduction", None)
    if reduction:
        shape += f", reduced at λ = {reduction['lambda']:g}"
    fig.suptitle(title or f"{spec.name}: {spec.model.upper()} model, weights ({weights}), "
                          f"{shape}", fontsize=11)
    fig.savefig(out, dpi=110)
    return out
