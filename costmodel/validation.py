"""Cost models against measurement: predictions next to the reference executor.

For generated windows at several rates and selectivities, every candidate
plan runs on :func:`cqopt.costmodel.reference_executor.execute`; per operator we measure the
output rate (emitted tuples per second of window) and the bytes it holds, and
set next to them what each model predicts from the same window's measured
statistics (rates, selectivities and join selectivities of that window, so
that sampling noise is not counted as model error).

What is compared, per operator kind:

- ``rate``: the predicted output rate against emitted / W, both models;
- ``queue``: OM's intermediate queue ``c_int = c_r · W`` (bytes) against the
  bytes the operator emitted in the window;
- ``state``: the model's memory against the bytes the operator holds (a
  join: both input windows). OM counts no operator state, only buffers and
  queues, and PIPES none for stateless operators, so only PIPES's join state
  is expected to agree; the other rows show how far each model is from what
  an operator really holds.

The executor evaluates each window as a snapshot (every pair of the two
windows joins once per round); PIPES models a continuous sliding-window join
in which each arriving tuple probes the other window, so its join output
rate is twice the snapshot rate by construction. This module only measures;
``scripts/validate_costmodel.py`` prints the table and the tests pin the rows
that must agree.

This is the one costmodel module that uses pandas and the executor; the
cost kernels do not.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from cqopt.catalog import Catalog
from cqopt.costmodel.reference_executor import execute, join_sizes, select_mask
from cqopt.costmodel.registry import make_model, model_names
from cqopt.optimizer.plans.nodes import SourceNode
from cqopt.optimizer.query.errors import UnsupportedQueryError
from cqopt.optimizer.query.logical import ContinuousQuery, parse_query
from cqopt.optimizer.query.statistics import rate_name, sel_name
from cqopt.optimizer.rules.enumerate import enumerate_plans

KEY_DOMAIN = 50  # join keys uniform over this many values: jsel about 1/50


@dataclass(frozen=True)
class Setting:
    rate: float  # tuples/s of every stream
    sel: float  # target selectivity of every selection


def generate_windows(query: ContinuousQuery, setting: Setting, window_s: float,
                     rng: np.random.Generator) -> dict[str, pd.DataFrame]:
    """One window per stream: ``rate · W`` tuples, selections passing about ``sel``.

    Columns a selection restricts take a passing value with probability
    ``sel`` (drawn from the selection's own point set or interval), others a
    value uniform over the key domain.
    """
    windows = {}
    n = max(1, int(round(setting.rate * window_s)))
    for ref in query.streams:
        selection = query.selections.get(ref.name)
        frame = {}
        for col in ref.columns:
            if col.type == "string":
                frame[col.name] = rng.choice(["a", "b", "c"], n)
            elif col.type == "bool":
                frame[col.name] = rng.random(n) < 0.5
            else:
                frame[col.name] = rng.integers(0, KEY_DOMAIN, n) + 3  # keys 3..52
            if selection and col.name in selection.columns:
                values = selection.columns[col.name]
                inside = values.points[0] if values.is_points else _inside(values)
                passing = rng.random(n) < setting.sel
                frame[col.name] = np.where(passing, inside, -1_000_000)
        windows[ref.name] = pd.DataFrame(frame)
    return windows


def _inside(values) -> float:
    iv = values.intervals[0]
    if iv.lo is None:
        return iv.hi - 1
    if iv.hi is None:
        return iv.lo + 1
    return (iv.lo + iv.hi) / 2


def window_statistics(query: ContinuousQuery, windows: dict[str, pd.DataFrame],
                      window_s: float) -> dict[str, float]:
    """The statistics of these windows, measured: what the models are fed.

    One round of :func:`round_statistics`.
    """
    rounds = {s: np.zeros(len(w), np.int64) for s, w in windows.items()}
    return {name: float(values[0])
            for name, values in round_statistics(query, windows, rounds, 1, window_s).items()}


def round_statistics(query: ContinuousQuery, windows: dict[str, pd.DataFrame],
                     rounds: dict[str, np.ndarray], n_rounds: int,
                     window_s: float) -> dict[str, np.ndarray]:
    """The measured statistics of many rounds at once, each as its window alone gives them.

    A rate is a round's tuples over ``W``; a selectivity the share of a round's
    tuples that pass; a join selectivity the pairs a round joins over the pairs
    it could (:func:`~cqopt.costmodel.reference_executor.join_sizes`). A
    selectivity over no tuple (or no pair) is NaN, as the estimators skip it.

    Parameters
    ----------
    query : ContinuousQuery
    windows : dict of DataFrame
        Each stream's tuples of every round, its columns the catalog's.
    rounds : dict of ndarray
        Each stream's round of each tuple, integers in ``[0, n_rounds)``.
    n_rounds : int
    window_s : float
        The window ``W``, seconds.

    Returns
    -------
    dict of ndarray
        Each statistic of the query, ``n_rounds`` values.

    Examples
    --------
    >>> from cqopt.catalog import Catalog
    >>> from cqopt.optimizer.query.logical import parse_query
    >>> cat = Catalog.from_dict({"streams": {"S": {"rate": [1, 10],
    ...     "columns": {"a": "int"}}}})
    >>> q = parse_query("SELECT S.a FROM S WHERE S.a = 1 WINDOW [1]", cat)
    >>> stats = round_statistics(q, {"S": pd.DataFrame({"a": [1, 2, 1]})},
    ...                          {"S": np.array([0, 0, 2])}, 3, 1.0)
    >>> stats["rate.S"].tolist(), stats["sel.S"].tolist()
    ([2.0, 0.0, 1.0], [0.5, nan, 1.0])
    """
    counts = {s: np.bincount(rounds[s], minlength=n_rounds) for s in windows}
    stats = {rate_name(s): counts[s] / window_s for s in windows}
    framed = {s: w.add_prefix(f"{s}.") for s, w in windows.items()}
    with np.errstate(invalid="ignore", divide="ignore"):  # no tuple: NaN
        for stream, selection in query.selections.items():
            passed = np.bincount(rounds[stream], minlength=n_rounds,
                                 weights=select_mask(selection, framed[stream]).to_numpy())
            stats[sel_name(stream)] = passed / counts[stream]
        pairs: dict[str, list] = {}
        for pred in (*query.joins, *query.thetas):
            pairs.setdefault(pred.statistic, []).append(pred)
        for name, preds in pairs.items():
            a, b = sorted({s for p in preds for s, _ in p.columns})
            joined = join_sizes(framed[a], framed[b], tuple(preds), (rounds[a], rounds[b]),
                                n_rounds)
            stats[name] = joined / (counts[a].astype(np.float64) * counts[b])
    return stats


def measure(catalog: Catalog, sqls: dict[str, str], settings: list[Setting],
            seed: int = 0, models: Sequence[str] | None = None) -> pd.DataFrame:
    """One row per (query, setting, model, plan, operator): measured and predicted.

    ``models`` names the registered models to predict with (default: every one).
    """
    rng = np.random.default_rng(seed)
    models = [make_model(name, catalog) for name in (models or model_names())]
    rows = []
    for name, sql in sqls.items():
        query = parse_query(sql, catalog)
        window_s = common_range_seconds(query, name)
        plans = enumerate_plans(query, catalog=catalog)  # the same for every setting
        for setting in settings:
            windows = generate_windows(query, setting, window_s, rng)
            stats = window_statistics(query, windows, window_s)
            for plan in plans:
                run = execute(plan, query, windows)
                costs = {m.name: m.cost(plan, stats) for m in models}
                for key in plan.operators():
                    node, counts = plan.node(key), run.operators[key]
                    if isinstance(node, SourceNode):
                        held = counts.held * node.out_width
                    else:
                        held = sum(n * w for n, w in zip(counts.inputs, node.in_widths))
                    for model in models:
                        op = costs[model.name].operators[key]
                        rows.append({
                            "query": name, "rate": setting.rate, "sel": setting.sel,
                            "model": model.name, "plan": plan.id, "operator": key,
                            "kind": node.kind,
                            "measured_rate": counts.emitted / window_s,
                            "predicted_rate": float(op.rate),
                            "measured_emitted_bytes": counts.emitted * node.out_width,
                            "predicted_queue": float(op.rate) * window_s * node.out_width,
                            "measured_held_bytes": held,
                            "predicted_memory": float(op.memory),
                        })
    return pd.DataFrame(rows)


def common_range_seconds(query: ContinuousQuery, name: str = "query") -> float:
    """The one ``[RANGE w]`` window every stream of ``query`` has, in seconds.

    Windows are generated as ``rate · w`` tuples per stream and rates measured
    per ``w``: other windows (ROWS, NOW, UNBOUNDED, or different lengths) have
    no such reading here.
    """
    windows = {s.window for s in query.streams}
    seconds = {w.seconds for w in windows if w.kind == "range"}
    if len(seconds) != 1 or any(w.kind != "range" for w in windows):
        found = ", ".join(f"{s.name} {s.window}" for s in query.streams)
        raise UnsupportedQueryError(f"{name}: the validation needs every stream to have one "
                                    f"[RANGE w] window of the same length; found {found}")
    return seconds.pop()


def relative_error(predicted: pd.Series, measured: pd.Series) -> pd.Series:
    """|predicted − measured| / measured, 0 where both are 0."""
    diff = (predicted - measured).abs()
    return diff.where(measured == 0, diff / measured.where(measured != 0, 1.0)) \
        .where(~((measured == 0) & (predicted == 0)), 0.0)


def error_table(rows: pd.DataFrame) -> pd.DataFrame:
    """Median and maximum relative error per model, operator kind and quantity."""
    parts = []
    for quantity, pred, meas in (("rate", "predicted_rate", "measured_rate"),
                                 ("queue", "predicted_queue", "measured_emitted_bytes"),
                                 ("state", "predicted_memory", "measured_held_bytes")):
        subset = rows if quantity != "queue" else rows[rows.model == "om"]
        err = relative_error(subset[pred], subset[meas])
        parts.append(subset.assign(quantity=quantity, error=err))
    table = pd.concat(parts).groupby(["model", "kind", "quantity"])["error"]
    return table.agg(median="median", max="max", n="size").reset_index()
