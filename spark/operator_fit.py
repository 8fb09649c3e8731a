"""The engine model's constants fitted per operator, on Spark's own metrics of a run.

Fitted on whole-plan seconds alone, the engine model's constants are
collinear: every plan of a query reads the same rounds, so a scan's cost
and a join input's move together, and non-negative least squares sets most
of them to zero. Spark's SQL metrics (:mod:`cqopt.spark.operator_metrics`)
time parts of a plan on their own: each whole-stage pipeline, each shuffle's
write, each broadcast's build, with the rows of every operator in them. The
fit (RTStream's per-operator cost profiling, seed 000, section 4.1) is in
two steps:

1. **Per operator** (:func:`fit_task_costs`): every pipeline and every
   timed operator outside one is an equation, its seconds the sum of its
   operators' rows times their per-tuple costs (:func:`record_work`: a
   scan's rows out, a selection's, projection's or aggregate's rows in, a
   join's rows in and out, a shuffle or broadcast feeding a join its rows
   as the join's input). Non-negative least squares over all of them gives
   each per-tuple constant in Spark's task seconds.
2. **Per plan** (:func:`fit_plan_scale`): a round's wall seconds are
   ``job + join · joins + scale · Σ per-tuple work``, the per-tuple work the
   model's own at the round's observed statistics
   (:func:`cqopt.costmodel.engine.work`) priced at step 1's costs; the
   scale turns task seconds into wall seconds (about one over the cores
   busy). Three constants, not eight, fitted on the plan times.

A constant no profile tells anything of (a plan without an aggregate) keeps
the catalog's value, and a fixed cost per join that every plan has as often
as the job's is folded into ``job``: both are said in the fit's summary.

>>> import numpy as np
>>> from cqopt.spark.operator_metrics import OperatorRecord
>>> record_work(OperatorRecord("join", "ShuffledHashJoin", 300, 40, 0.0, 2))[3:7].tolist()
[0.0, 0.0, 300.0, 40.0]
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from cqopt.costmodel.engine import CONSTANTS
from cqopt.spark.operator_metrics import (
    PIPELINE,
    PROFILE_GLOB,
    OperatorMetricsError,
    OperatorRecord,
    read_round_profiles,
)

JOINS = ("BroadcastHashJoin", "ShuffledHashJoin", "SortMergeJoin", "BroadcastNestedLoopJoin",
         "CartesianProduct")
# The constants of the plan step, fitted on wall seconds; the others are per tuple.
PLAN_CONSTANTS = ("job", "join")
PER_TUPLE = tuple(n for n in CONSTANTS if n not in PLAN_CONSTANTS)
_AT = {name: i for i, name in enumerate(CONSTANTS)}


def record_work(record: OperatorRecord) -> np.ndarray:
    """The record's tuples per engine constant (in :data:`CONSTANTS` order): its seconds,
    in the model, are this times the per-tuple costs."""
    row = np.zeros(len(CONSTANTS))
    kind = record.kind
    if kind == "scan":
        row[_AT["scan"]] = record.rows_out
    elif kind in ("selection", "projection", "aggregate"):
        row[_AT[kind]] = record.rows_in
    elif kind == "join":
        row[_AT["join_input"]] = record.rows_in
        if record.operator in JOINS:
            row[_AT["join_output"]] = record.rows_out
    return row


def equations(records: Sequence[OperatorRecord]) -> tuple[np.ndarray, np.ndarray]:
    """``(work, seconds)``: one row per pipeline and per timed operator outside one.

    >>> recs = [OperatorRecord("", PIPELINE, 0, 0, 0.5, 1),
    ...         OperatorRecord("selection", "Filter", 1000, 10, 0.0, 1),
    ...         OperatorRecord("scan", "InMemoryTableScan", 1000, 1000, 0.0, 1),
    ...         OperatorRecord("join", "Exchange", 10, 10, 0.25, None)]
    >>> work, seconds = equations(recs)
    >>> work[:, 1:3].tolist(), work[:, 5].tolist(), seconds.tolist()
    ([[1000.0, 1000.0], [0.0, 0.0]], [0.0, 10.0], [0.5, 0.25])
    """
    rows, seconds = [], []
    for pipeline in (r for r in records if r.operator == PIPELINE):
        inside = [record_work(r) for r in records
                  if r.stage == pipeline.stage and r.operator != PIPELINE]
        if inside:
            rows.append(np.sum(inside, axis=0))
            seconds.append(pipeline.seconds)
    for record in records:
        if record.stage is None and record.kind and record.seconds > 0:
            rows.append(record_work(record))
            seconds.append(record.seconds)
    if not rows:
        return np.zeros((0, len(CONSTANTS))), np.zeros(0)
    return np.array(rows), np.array(seconds)


def fit_task_costs(work: np.ndarray, seconds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each per-tuple constant in task seconds, and which ones the equations determine.

    Non-negative least squares (``scipy.optimize.nnls``), columns scaled to a
    like size. A constant whose rows are zero in every equation is not
    determined (its value is 0 and its flag False).

    Examples
    --------
    >>> truth = np.array([0, 2e-6, 3e-7, 0, 0, 4e-6, 1e-6, 0])
    >>> rng = np.random.default_rng(0)
    >>> work = np.zeros((30, 8)); work[:, [1, 2, 5, 6]] = rng.uniform(1e3, 1e5, (30, 4))
    >>> costs, known = fit_task_costs(work, work @ truth)
    >>> np.allclose(costs, truth, rtol=1e-6), known.tolist()
    (True, [False, True, True, False, False, True, True, False])
    """
    from scipy.optimize import nnls

    work = np.asarray(work, dtype=np.float64).copy()
    for name in PLAN_CONSTANTS:
        work[:, _AT[name]] = 0.0
    known = (work > 0).any(axis=0)
    costs = np.zeros(work.shape[1])
    if not known.any():
        return costs, known
    columns = work[:, known]
    scale = columns.max(axis=0)
    solution, _ = nnls(columns / scale, np.asarray(seconds, dtype=np.float64))
    costs[known] = solution / scale
    return costs, known


def fit_plan_scale(work: np.ndarray, seconds: np.ndarray, task_costs: np.ndarray
                   ) -> tuple[float, float, float, bool]:
    """``(job, join, scale, join_separable)`` of ``seconds ≈ job·work_job + join·work_join
    + scale · work @ task_costs``, by non-negative least squares in relative terms.

    When every timing has as many joins per job (one query's plans), the join's
    fixed cost cannot be told from the job's: it is folded into ``job`` (join 0,
    ``join_separable`` False).

    >>> work = np.array([[1, 2, 1e4, 0, 0, 2e4, 50, 0], [1, 2, 4e4, 0, 0, 8e4, 90, 0]], float)
    >>> costs = np.array([0, 0, 1e-6, 0, 0, 2e-6, 1e-5, 0])
    >>> seconds = 0.3 + 0.5 * work @ costs
    >>> [round(v, 6) for v in fit_plan_scale(work, seconds, costs)[:3]]
    [0.3, 0.0, 0.5]
    """
    from scipy.optimize import nnls

    work = np.asarray(work, dtype=np.float64)
    seconds = np.asarray(seconds, dtype=np.float64)
    job, join = work[:, _AT["job"]], work[:, _AT["join"]]
    tuples = work @ np.where(np.isin(CONSTANTS, PLAN_CONSTANTS), 0.0, task_costs)
    ratio = np.divide(join, job, out=np.zeros_like(join), where=job > 0)
    separable = bool(np.ptp(ratio) > 1e-9 * max(1.0, float(np.abs(ratio).max())))
    columns = [job, join, tuples] if separable else [job, tuples]
    matrix = np.stack(columns, axis=1) / seconds[:, None]
    scale = np.where(matrix.max(axis=0) > 0, matrix.max(axis=0), 1.0)
    solution, _ = nnls(matrix / scale, np.ones(len(seconds)))
    solution = solution / scale
    if separable:
        return float(solution[0]), float(solution[1]), float(solution[2]), True
    return float(solution[0]), 0.0, float(solution[1]), False


def read_profiles(run: str | Path) -> dict[tuple[int, str], list[OperatorRecord]]:
    """Every ``(round, plan)``'s operator records a run folder holds (none: ``{}``).

    Raises
    ------
    OperatorMetricsError
        A file of records that cannot be read.
    """
    found = {}
    for path in sorted(Path(run).glob(PROFILE_GLOB)):
        try:
            index = int(path.stem.split("-")[-1])
        except ValueError:
            raise OperatorMetricsError(f"{path}: not named operators-RRRRRR.json; "
                                       "remove it") from None
        for plan, records in read_round_profiles(path).items():
            found[(index, plan)] = records
    return found


def stacked(profiles: Mapping[tuple[int, str], Sequence[OperatorRecord]],
            keep=lambda key: True) -> tuple[np.ndarray, np.ndarray]:
    """The :func:`equations` of every profile whose key ``keep`` accepts, stacked."""
    parts = [equations(records) for key, records in profiles.items() if keep(key)]
    parts = [p for p in parts if len(p[1])]
    if not parts:
        return np.zeros((0, len(CONSTANTS))), np.zeros(0)
    return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])
