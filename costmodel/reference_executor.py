"""A reference executor: runs a plan over one window of tuples per stream.

The ground truth against which cost models are checked: every operator runs
on pandas DataFrames, simply and correctly, not fast. One call evaluates one
round of the OM processing model: each stream's current window goes in, each
operator reads its inputs' whole output, and the root's output is the round's
result. A join is evaluated on the two windows as a whole (every pair of the
left and right windows that satisfies its predicates), not incrementally.

Inside the executor a column is named ``"STREAM.column"`` and an aggregate's
result by its text, ``"COUNT(*)"``, ``"AVG(S.a)"``. The result's columns are
named as the query's output columns, in the query's order.

Per operator the executor counts the tuples it ``read`` (the sum over its
inputs; ``inputs`` has one count per input), ``emitted`` and ``held``: what
the operator keeps in memory during the round. A source holds its window; a
selection, projection or aggregate holds what it read in the window (it
scans the window once); a join holds both of its inputs' windows.

Aggregates follow SQL: without GROUP BY there is one result row even for an
empty window (COUNT 0; SUM, AVG, MIN and MAX missing, as NaN).

>>> import pandas as pd
>>> from cqopt.catalog import Catalog
>>> from cqopt.optimizer.query.logical import parse_query
>>> from cqopt.optimizer.rules.enumerate import enumerate_plans
>>> cat = Catalog.from_dict({"streams": {"S": {"rate": [1, 10],
...     "columns": {"a": "int", "b": "int", "c": "int"}}}})
>>> q = parse_query("SELECT S.a FROM S WHERE S.b IN (1, 2) WINDOW [1]", cat)
>>> window = pd.DataFrame({"a": [1, 2, 3, 3], "b": [1, 5, 2, 2], "c": [0, 0, 0, 0]})
>>> run = execute(enumerate_plans(q)[0], q, {"S": window})
>>> sorted(multiset(run.result).items())
[((1,), 1), ((3,), 2)]
>>> run.operators["sel:S"]
OperatorCounts(read=4, emitted=3, held=4, inputs=(4,))
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from sqlglot import exp

from cqopt.optimizer.plans import nodes as kinds
from cqopt.optimizer.plans.plan import Plan, column_text
from cqopt.optimizer.query import predicates
from cqopt.optimizer.query.classify import output_column_ref
from cqopt.optimizer.query.join_closure import JoinPredicate
from cqopt.optimizer.query.literals import literal_value
from cqopt.optimizer.query.logical import AGGREGATES, ContinuousQuery, aggregate_text
from cqopt.optimizer.query.selections import Selection


@dataclass(frozen=True)
class OperatorCounts:
    """Tuples one operator read (per input in ``inputs``), emitted and held."""

    read: int
    emitted: int
    held: int
    inputs: tuple[int, ...] = ()


@dataclass(frozen=True)
class ExecutionResult:
    result: pd.DataFrame  # the result multiset, columns named as the query's output
    operators: dict[str, OperatorCounts]  # per operator key, bottom-up


def execute(plan: Plan, query: ContinuousQuery,
            windows: Mapping[str, pd.DataFrame]) -> ExecutionResult:
    """Run ``plan`` over one window per stream (columns named as in the catalog)."""
    frames: dict[str, pd.DataFrame] = {}
    counts: dict[str, OperatorCounts] = {}
    for key in plan.operators():
        node = plan.node(key)
        inputs = [frames[k] for k in node.inputs]
        out = run_operator(node, inputs, query, windows)
        frames[key] = out.reset_index(drop=True)
        sizes = tuple(len(f) for f in inputs)
        read = len(out) if isinstance(node, kinds.SourceNode) else sum(sizes)
        counts[key] = OperatorCounts(read, len(out), read, sizes)
    root = frames[plan.root]
    result = pd.DataFrame({i: root[column_text(output_column_ref(c))].to_numpy()
                           for i, c in enumerate(query.projection)}, index=root.index)
    result.columns = [c.name for c in query.projection]
    return ExecutionResult(result, counts)


def multiset(frame: pd.DataFrame, digits: int = 9) -> Counter:
    """The rows of ``frame`` as a Counter of tuples, comparable across plans.

    Numbers become Python ints or floats rounded to ``digits`` significant
    digits (sums in another order differ in the last bits); NaN becomes None.
    """
    def canonical(value: Any) -> Any:
        if isinstance(value, (bool, np.bool_)):
            return bool(value)
        if isinstance(value, (int, np.integer)):
            return int(value)
        if isinstance(value, (float, np.floating)):
            value = float(value)
            if math.isnan(value):
                return None
            return int(value) if value.is_integer() else float(f"{value:.{digits}g}")
        return value

    return Counter(tuple(canonical(v) for v in row)
                   for row in frame.itertuples(index=False, name=None))


# -- operators ----------------------------------------------------------------
@kinds.consumer("the reference executor")
def run_operator(node: kinds.PlanNode, inputs: list[pd.DataFrame], query: ContinuousQuery,
                 windows: Mapping[str, pd.DataFrame]) -> pd.DataFrame:
    """One operator's output over its inputs' outputs (in order)."""


@run_operator.register
def _(node: kinds.SourceNode, inputs, query, windows):
    return _source(query, node.stream, windows)


@run_operator.register
def _(node: kinds.SelectionNode, inputs, query, windows):
    return inputs[0][select_mask(node.predicate, inputs[0])]


@run_operator.register
def _(node: kinds.ProjectionNode, inputs, query, windows):
    keys = [column_text(c) for c in node.columns]
    return inputs[0][list(dict.fromkeys(keys))]  # a repeated output column is kept once


@run_operator.register
def _(node: kinds.JoinNode, inputs, query, windows):
    return join(inputs[0], inputs[1], node.predicate)


@run_operator.register
def _(node: kinds.AggregateNode, inputs, query, windows):
    return aggregate(inputs[0], node.aggregates, node.group_by, node.having)


def _source(query: ContinuousQuery, stream: str,
            windows: Mapping[str, pd.DataFrame]) -> pd.DataFrame:
    if stream not in windows:
        raise KeyError(f"no window given for stream {stream}")
    window = windows[stream]
    names = [c.name for c in query.stream(stream).columns]
    missing = [n for n in names if n not in window.columns]
    if missing:
        raise KeyError(f"the window of {stream} lacks column(s) {', '.join(missing)}")
    return window[names].rename(columns={n: f"{stream}.{n}" for n in names})


def select_mask(selection: Selection, frame: pd.DataFrame) -> pd.Series:
    """Rows of ``frame`` that pass the grouped selection (its one condition, ``predicate``)."""
    return pd.Series(evaluate(selection.predicate, frame), index=frame.index, dtype=bool)


def join(left: pd.DataFrame, right: pd.DataFrame, predicates: tuple) -> pd.DataFrame:
    """Every pair of rows of ``left`` and ``right`` that satisfies all ``predicates``.

    Equi-joins are merge keys (all of them, redundant ones too); theta
    predicates filter the merged frame; with no equi-join, a cross product.
    """
    left_on, right_on = _merge_keys(left, predicates)
    if left_on:
        out = pd.merge(left, right, how="inner", left_on=left_on, right_on=right_on)
    else:
        out = pd.merge(left, right, how="cross")
    for p in predicates:
        if not isinstance(p, JoinPredicate):
            out = out[evaluate(p.expression, out)]
    return out


def join_size(left: pd.DataFrame, right: pd.DataFrame, predicates: tuple) -> int:
    """``len(join(left, right, predicates))``, without building the pairs when every
    predicate is an equi-join: the sum over key values of their counts on each side.

    A statistics pass over a round of 100,000-tuple streams would otherwise build
    every matching pair to count them.

    >>> left = pd.DataFrame({"A.k": [1, 1, 2, 3]})
    >>> right = pd.DataFrame({"B.k": [1, 2, 2, 4]})
    >>> on = (JoinPredicate(("A", "k"), ("B", "k")),)
    >>> join_size(left, right, on), len(join(left, right, on))
    (4, 4)
    """
    zeros = (np.zeros(len(left), np.int64), np.zeros(len(right), np.int64))
    return int(join_sizes(left, right, predicates, zeros, 1)[0])


def join_sizes(left: pd.DataFrame, right: pd.DataFrame, predicates: tuple,
               groups: tuple[np.ndarray, np.ndarray], n_groups: int) -> np.ndarray:
    """:func:`join_size` of every group at once: only rows of one group pair.

    Parameters
    ----------
    left, right : DataFrame
        Both sides' rows, columns named ``"STREAM.column"``.
    predicates : tuple
        The join's predicates.
    groups : (ndarray, ndarray)
        Each side's group of each row (a round), integers in ``[0, n_groups)``.
    n_groups : int
        How many groups there are.

    Returns
    -------
    ndarray of int64
        The pairs each group joins, ``n_groups`` long.

    Examples
    --------
    >>> left = pd.DataFrame({"A.k": [1, 1, 2, 1]})
    >>> right = pd.DataFrame({"B.k": [1, 2, 1]})
    >>> on = (JoinPredicate(("A", "k"), ("B", "k")),)
    >>> join_sizes(left, right, on, (np.array([0, 0, 0, 1]), np.array([0, 0, 1])), 3)
    array([3, 1, 0])
    """
    left_on, right_on = _merge_keys(left, predicates)
    sizes = np.zeros(n_groups, np.int64)
    if not left_on or len(left_on) != len(predicates):  # a theta predicate: filter pairs
        for g in np.intersect1d(groups[0], groups[1]):
            sizes[g] = len(join(left[groups[0] == g], right[groups[1] == g], predicates))
        return sizes
    # Each (group, key...) of both sides as one code, so counting the pairs is counting
    # codes: 20-40 times faster than grouping and merging frames (a workload's round
    # pays this for every join of every query).
    code = np.concatenate([np.asarray(groups[0], np.int64), np.asarray(groups[1], np.int64)])
    for a, b in zip(left_on, right_on):
        # use_na_sentinel=False: NaN keys match each other, as pd.merge in join() matches
        # them; one factorization of both sides, so equal values share a code.
        values = pd.factorize(np.concatenate([left[a].to_numpy(), right[b].to_numpy()]),
                              use_na_sentinel=False)[0]
        code = pd.factorize(code * (int(values.max(initial=0)) + 1) + values)[0]
    n = len(left)
    held = int(code.max(initial=-1)) + 1
    pairs = (np.bincount(code[:n], minlength=held).astype(np.int64)
             * np.bincount(code[n:], minlength=held))
    group_of = np.zeros(held, np.int64)
    group_of[code[:n]] = groups[0]
    np.add.at(sizes, group_of, pairs)
    return sizes


def _merge_keys(left: pd.DataFrame, predicates: tuple) -> tuple[list[str], list[str]]:
    """The equi-joins of ``predicates`` as merge keys: ``left``'s columns, the other side's."""
    left_on, right_on = [], []
    for p in predicates:
        if isinstance(p, JoinPredicate):
            a, b = column_text(p.left), column_text(p.right)
            left_on.append(a if a in left.columns else b)
            right_on.append(b if a in left.columns else a)
    return left_on, right_on


def aggregate(frame: pd.DataFrame, aggregates: tuple, group_by: tuple,
              having: exp.Expression | None) -> pd.DataFrame:
    """GROUP BY ``group_by`` computing ``aggregates``, then filter with HAVING."""
    keys = [column_text(c) for c in group_by]
    if keys:
        grouped = frame.groupby(keys, sort=True, dropna=False)
        columns = {}
        for agg in aggregates:
            if agg.argument is None:
                columns[str(agg)] = grouped.size()
            else:
                series = grouped[column_text(agg.argument)]
                columns[str(agg)] = getattr(series, _PANDAS[agg.function])()
        out = pd.DataFrame(columns, index=grouped.size().index).reset_index()
        out = out[keys + [str(a) for a in aggregates]] if aggregates else out[keys]
    else:
        row = {}
        for agg in aggregates:
            if agg.argument is None:
                row[str(agg)] = len(frame)
            elif agg.function == "COUNT":
                row[str(agg)] = int(frame[column_text(agg.argument)].count())
            elif frame.empty:
                row[str(agg)] = np.nan  # SQL: SUM/AVG/MIN/MAX of nothing is NULL
            else:
                row[str(agg)] = getattr(frame[column_text(agg.argument)], _PANDAS[agg.function])()
        out = pd.DataFrame([row])
    if having is not None:
        out = out[np.asarray(evaluate(having, out), dtype=bool)]
    return out


_PANDAS = {"COUNT": "count", "SUM": "sum", "AVG": "mean", "MIN": "min", "MAX": "max"}


# -- expressions --------------------------------------------------------------
def evaluate(node: exp.Expression, frame: pd.DataFrame) -> Any:
    """Evaluate a qualified predicate (or HAVING condition) over ``frame``, vectorised."""
    def operand(leaf: exp.Expression) -> Any:
        if isinstance(leaf, exp.Column):
            return frame[f"{leaf.table}.{leaf.name}"]
        if type(leaf) in AGGREGATES:
            return frame[_aggregate_key(leaf)]
        if isinstance(leaf, exp.Boolean):  # the FALSE of an always-empty selection
            return pd.Series(bool(leaf.this), index=frame.index)
        return literal_value(leaf)

    return predicates.evaluate(node, operand)


def _aggregate_key(node: exp.Expression) -> str:
    """The column an aggregate call's result has: ``COUNT(*)``, ``SUM(S.a)``."""
    arg = node.this
    argument = None if arg is None or isinstance(arg, exp.Star) else (arg.table, arg.name)
    return aggregate_text(AGGREGATES[type(node)], argument)
