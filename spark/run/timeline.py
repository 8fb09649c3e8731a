"""A run's timeline: which plan ran when, its seconds against the others' and the
prediction, and the lag, drawn from the round log alone.

:func:`timeline_figure` is a pure function of the rounds table (``rounds.csv``,
:func:`cqopt.spark.run.roundlog.rounds_table` of the log records): the
columns ``round``, ``plan``, ``plan_seconds`` and ``lag_s``; with ``--shadow``,
``shadow:PLAN`` (each plan's measured seconds); and ``predicted:chosen``, the
chosen plan's seconds by the engine model, where the report predicted them.
It needs matplotlib (the ``report`` extra); it draws, the caller writes.

>>> import pandas as pd
>>> rounds = pd.DataFrame({"round": [0, 1, 2], "plan": ["A", "B", "A"],
...                        "plan_seconds": [0.2, 0.1, 0.3], "lag_s": [0.0, 1.0, 0.0],
...                        "shadow:A": [0.2, 0.3, 0.3], "shadow:B": [0.25, 0.1, 0.4]})
>>> [ax.get_ylabel() for ax in timeline_figure(rounds, "Q1").axes]
['seconds', 'plan run', 'lag (s)']
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from cqopt.charts.diagram import plan_colours

SHADOW, PREDICTED = "shadow:", "predicted:chosen"
LABEL_SIZE = 12  # points: readable when the figure is shown 800 px wide


def timeline_plans(rounds: pd.DataFrame) -> list[str]:
    """The plans of the timeline: those that ran, in order of first run, then those only
    timed in the shadow.

    >>> timeline_plans(pd.DataFrame({"plan": ["B", "A", "B"], "shadow:C": [1, 1, 1]}))
    ['B', 'A', 'C']
    """
    ran = list(dict.fromkeys(rounds["plan"]))
    shadowed = [c[len(SHADOW):] for c in rounds.columns if c.startswith(SHADOW)]
    return ran + [p for p in shadowed if p not in ran]


def timeline_figure(rounds: pd.DataFrame, query: str) -> Figure:
    """The run's timeline as a figure of three panels sharing the rounds' axis.

    Parameters
    ----------
    rounds : DataFrame
        One row per round (see the module docstring).
    query : str
        The query's name, for the title.

    Returns
    -------
    Figure
        Seconds per round (the chosen plan measured, each other plan's shadow
        time, the engine model's prediction), the plan run in each round, and
        the lag behind the newest complete round.
    """
    plans = timeline_plans(rounds)
    colour = dict(zip(plans, plan_colours(len(plans))))
    x = rounds["round"].to_numpy()
    fig = Figure(figsize=(10.0, 7.2), layout="constrained")
    seconds, ran, lag = fig.subplots(3, 1, sharex=True, height_ratios=[3, 1.4, 1.2])
    for plan in plans:
        column = SHADOW + plan
        if column in rounds:
            seconds.plot(x, rounds[column], color=colour[plan], lw=1.2, alpha=0.75,
                         label=f"{plan} (shadow)")
    seconds.plot(x, rounds["plan_seconds"], color="black", lw=2, marker="o", ms=4,
                 label="chosen plan, measured")  # with its result written; shadows: noop sink
    if PREDICTED in rounds and rounds[PREDICTED].notna().any():
        seconds.plot(x, rounds[PREDICTED], color="black", lw=1.5, ls="--",
                     label="chosen plan, predicted (engine model)")
    seconds.set_ylabel("seconds")
    seconds.set_ylim(bottom=0)
    # Above the panel, so the panels keep the figure's width.
    seconds.legend(fontsize=LABEL_SIZE - 2, loc="lower left", bbox_to_anchor=(0.0, 1.01),
                   ncols=2, frameon=False)
    row = {plan: i for i, plan in enumerate(plans)}
    ran.scatter(x, [row[p] for p in rounds["plan"]], c=[colour[p] for p in rounds["plan"]],
                marker="s", s=40)
    ran.set_yticks(range(len(plans)), [_short(p) for p in plans])
    ran.set_ylim(-0.6, len(plans) - 0.4)
    ran.set_ylabel("plan run")
    lag.step(x, rounds["lag_s"].fillna(0.0), where="mid", color="#8a4b00")
    lag.set_ylabel("lag (s)")
    lag.set_ylim(bottom=0)
    lag.set_xlabel("round")
    for ax in (seconds, ran, lag):
        ax.tick_params(labelsize=LABEL_SIZE - 1)
        ax.yaxis.label.set_size(LABEL_SIZE)
        ax.grid(axis="x", alpha=0.3)
    lag.xaxis.label.set_size(LABEL_SIZE)
    if len(x) and np.ptp(x) < 20:
        lag.set_xticks(x)
    fig.suptitle(f"{query}: which plan ran when, its seconds against the other plans' and "
                 "the prediction, and the lag\n(measured: the chosen plan run and its result "
                 "written; shadow: each plan timed into a no-op sink)", fontsize=LABEL_SIZE)
    return fig


def _short(plan: str, width: int = 24) -> str:
    return plan if len(plan) <= width else plan[:width - 1] + "…"
