"""The engine model's constants fitted to the plan times ``cqopt run`` measured.

Every round a run logs the chosen plan's wall time (``plan_seconds``), and
with ``--shadow`` every candidate plan's (``shadow_seconds``), beside the
round's observed statistics. :func:`fit_runs` turns each (plan, round) into
the model's work at those statistics (:func:`cqopt.costmodel.engine.work`)
and fits the constants, as RTStream profiles each operator's cost from
execution (seed 000, section 4.1); constants a catalog already had from an
earlier fit are smoothed exponentially toward the new ones.

Two ways, by what the run folder holds:

- **per operator**, where it holds Spark's operator records of its plan jobs
  (``log/operators-RRRRRR.json``, :mod:`cqopt.spark.operator_metrics`): the
  per-tuple constants from Spark's pipeline and operator times, then the
  job, the join and the task-to-wall scale from the plan times
  (:mod:`cqopt.spark.operator_fit`);
- **on whole-plan seconds** otherwise
  (:func:`~cqopt.costmodel.engine.fit_constants`), whose constants are
  collinear: the summary says so.

The model's error is reported out of sample: the constants are fitted on
the even rounds and judged on the odd ones (median absolute relative error,
per plan and overall); the constants written are then fitted on every round.
A fit is refused (:class:`FitRefused`, one line saying what to run instead,
nothing written) with fewer plan times than constants, a negative constant,
or a held-out error over :data:`MAX_HELD_OUT_ERROR`.
Rounds grouped with others (a backlog run plan by plan) share one job's time
and are fitted as that job; rounds of a workload's joint job (many queries'
plans in one job) are left out, as are rounds without tuples.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

import numpy as np

from cqopt.catalog import Catalog
from cqopt.catalog.catalog import EngineConstants
from cqopt.costmodel import make_model
from cqopt.costmodel.engine import CONSTANTS, fit_constants, smoothed, work
from cqopt.errors import CqoptError, parse_json, read_text_file
from cqopt.optimizer.query.logical import parse_query
from cqopt.optimizer.plans.builder import PlanBuilder, shape_of
from cqopt.optimizer.plans.plan import Plan
from cqopt.optimizer.plans.strategies import split_id
from cqopt.optimizer.rules.enumerate import enumerate_plans
from cqopt.spark.operator_fit import (
    PLAN_CONSTANTS,
    fit_plan_scale,
    fit_task_costs,
    read_profiles,
    record_work,
    stacked,
)


class EngineFitError(CqoptError):
    """A run folder cannot be read for plan times, or holds too few of them."""


class FitRefused(EngineFitError):
    """A fit that cannot be trusted; nothing is written."""


# A fit whose median error on rounds left out of it is above this is refused.
MAX_HELD_OUT_ERROR = 0.30
FLOOR = 1e-12  # a constant the data set to 0, kept positive so the catalog stays valid


@dataclass(frozen=True)
class Timing:
    """One measured plan run: which plan, which round, its seconds and the model's work."""

    run: str
    query: str
    plan: str
    round: int
    seconds: float
    work: np.ndarray  # per constant, as cqopt.costmodel.engine.work gives it


@dataclass(frozen=True)
class EngineFit:
    """Fitted constants and how well they predict rounds they were not fitted on."""

    constants: EngineConstants
    timings: tuple[Timing, ...]
    held_out_error: float  # median |predicted - measured| / measured, odd rounds
    error_by_plan: dict[str, float]  # the same per plan
    in_sample_error: float
    method: str = "whole-plan seconds"  # or "per operator": on Spark's operator metrics
    notes: tuple[str, ...] = ()  # constants the data do not determine, said out loud
    operator_error: float | None = None  # the per-operator step's, on rounds left out

    def summary_lines(self) -> list[str]:
        """The fit in words, for the console and the catalog's comment."""
        plans = len({t.plan for t in self.timings})
        runs = len({t.run for t in self.timings})
        lines = [f"{len(self.timings)} plan times of {plans} plans from {runs} run(s), fitted "
                 f"{self.method}; median absolute error {self.held_out_error:.1%} on rounds "
                 f"left out of the fit, {self.in_sample_error:.1%} in sample"]
        if self.method == "whole-plan seconds":
            lines.append("  (no operator profiles in the runs: the constants of whole-plan "
                         "seconds are collinear, and some may be set to zero)")
        if self.operator_error is not None:
            lines.append(f"  per-operator step: {self.operator_error:.1%} of Spark's "
                         "pipeline seconds missed on rounds left out")
        lines += [f"  {plan}: {error:.1%}" for plan, error in self.error_by_plan.items()]
        lines += [f"  note: {note}" for note in self.notes]
        return lines


def read_timings(run: str | Path, catalog: Catalog) -> list[Timing]:
    """Every plan time a run folder logged, with the model's work at its round's statistics.

    Raises
    ------
    EngineFitError
        Not a ``cqopt run`` folder, or its query does not parse with ``catalog``.
    """
    folder = Path(run)
    try:
        state = parse_json(read_text_file(folder / "state.json"))
        sql, name = state["sql"], state["query"]
    except (OSError, ValueError, KeyError, TypeError):
        raise EngineFitError(f"--from-run {folder}: not a cqopt run folder (no readable "
                             "state.json); pass the --out of a cqopt run") from None
    try:
        query = parse_query(sql, catalog)
        plans = {p.id: p for p in enumerate_plans(query)}
    except CqoptError as err:
        raise EngineFitError(f"--from-run {folder}: its query {name} does not fit "
                             f"--catalog {catalog.source}: {err}") from None
    builder = PlanBuilder(query)

    def plan_of(plan_id: str) -> Plan | None:
        """A logged plan, hinted ones (an engine chart's) rebuilt from their unhinted order."""
        if plan_id not in plans:
            base, steps = split_id(plan_id)
            if base in plans:
                plans[plan_id] = builder.build_shape(shape_of(plans[base]).with_(
                    strategies=steps))
        return plans.get(plan_id)
    model = make_model("engine", catalog)

    def work_row(plan_id: str, record: dict[str, Any]) -> np.ndarray | None:
        plan = plan_of(plan_id)
        stats = {k: (math.nan if v is None else float(v))
                 for k, v in record["observed"].items()}
        if plan is None or any(math.isnan(stats.get(s, math.nan))
                               for s in model.statistics(plan)):
            return None  # a statistic the round did not define (no tuples on a stream)
        row = work(plan, stats, catalog)
        return row if np.isfinite(row).all() else None

    timings = []
    jobs: dict[tuple, list[dict[str, Any]]] = {}  # a backlog's rounds run as one job per plan
    for path in sorted((folder / "log").glob("round-*.json")):
        try:
            record = parse_json(read_text_file(path))
        except (OSError, ValueError) as err:
            raise EngineFitError(f"--from-run {folder}: {path.name} is not a round record "
                                 f"of cqopt run ({err}); pass the --out of a cqopt run") from None
        if record.get("joint_plans", 1) > 1:  # one job's time for many queries' plans
            continue
        if record.get("grouped_rounds", 1) > 1:
            jobs.setdefault((record.get("batch"), record["plan"], record["grouped_rounds"]),
                            []).append(record)
            continue
        if record.get("empty"):
            continue
        measured = dict(record.get("shadow_seconds") or {}) or {
            record["plan"]: record["plan_seconds"]}
        for plan_id, seconds in measured.items():
            row = work_row(plan_id, record) if seconds and seconds > 0 else None
            if row is not None:
                timings.append(Timing(str(folder), name, plan_id, int(record["round"]),
                                      float(seconds), row))
    # One grouped job: its seconds are its rounds' shares summed, its work their work
    # summed (the model is linear in it), the engine's fixed cost of a job counted once.
    job = CONSTANTS.index("job")
    for (_, plan_id, size), records in jobs.items():
        # a round without tuples adds nothing to its job's work
        rows = [np.zeros(len(CONSTANTS)) if r.get("empty") else work_row(plan_id, r)
                for r in records]
        if len(records) != size or any(row is None for row in rows):
            continue  # a job only partly logged (a kill), or a round without statistics
        total = np.sum(rows, axis=0)
        total[job] = 1.0
        seconds = float(sum(r["plan_seconds"] for r in records))
        if seconds > 0:
            timings.append(Timing(str(folder), name, plan_id,
                                  min(int(r["round"]) for r in records), seconds, total))
    return timings


def fit_runs(runs: Sequence[str | Path], catalog: Catalog, *, alpha: float = 0.5,
             refuse: bool = True) -> EngineFit:
    """The engine constants fitted to the plan times of ``runs`` (per operator where the
    runs hold Spark's operator profiles, else on whole-plan seconds), smoothed into the
    catalog's where it holds fitted ones (``alpha`` the new fit's weight).

    Raises
    ------
    EngineFitError
        A folder is not a run; or, with ``refuse``, a fit that cannot be trusted
        (:class:`FitRefused`: fewer timings than constants, a negative constant,
        a held-out error over :data:`MAX_HELD_OUT_ERROR`).
    """
    timings = [t for run in runs for t in read_timings(run, catalog)]
    profiles = {(str(Path(run)), r, plan): records for run in runs
                for (r, plan), records in read_profiles(run).items()}
    if refuse and len(timings) < len(CONSTANTS):
        raise FitRefused(f"calibrate --from-run needs at least {len(CONSTANTS)} timed rounds "
                         f"to fit the engine model's {len(CONSTANTS)} constants, got "
                         f"{len(timings)}: run more rounds, or with --shadow (which times "
                         "every plan); nothing written")
    if len(timings) < 2:
        raise EngineFitError(f"the runs given hold {len(timings)} usable plan times; the "
                             "engine model needs at least 2")
    rows = np.array([t.work for t in timings])
    seconds = np.array([t.seconds for t in timings])
    even = np.array([t.round % 2 == 0 for t in timings])
    if even.all() or not even.any():  # every round of one parity: alternate the timings
        even = np.arange(len(timings)) % 2 == 0
    fit = _fit_profiled if profiles else _fit_whole
    held, _ = fit(timings, profiles, catalog, even)
    errors = np.abs(rows @ _vector(held) - seconds) / seconds
    fitted, notes = fit(timings, profiles, catalog, np.ones(len(timings), bool))
    fitted_from = {f.name for f in fields(EngineConstants)
                   if getattr(catalog.engine, f.name) != f.default}
    if fitted_from:  # the catalog holds an earlier fit: smooth toward the new one
        fitted = smoothed(catalog.engine, fitted, alpha)
    by_plan = {}
    for plan in dict.fromkeys(t.plan for t in timings):
        mine = np.array([t.plan == plan for t in timings]) & ~even
        if mine.any():
            by_plan[plan] = float(np.median(errors[mine]))
    in_sample = np.abs(rows @ _vector(fitted) - seconds) / seconds
    result = EngineFit(fitted, tuple(timings), float(np.median(errors[~even])), by_plan,
                       float(np.median(in_sample)),
                       "per operator" if profiles else "whole-plan seconds", tuple(notes),
                       _operator_error(profiles) if profiles else None)
    if refuse:
        refuse_untrusted(result)
    return result


def refuse_untrusted(fit: EngineFit) -> None:
    """Raise :class:`FitRefused` for a fit with a negative constant or a held-out error
    over :data:`MAX_HELD_OUT_ERROR`; its one line says what to run instead."""
    for name in CONSTANTS:
        value = getattr(fit.constants, name)
        if value < 0:
            raise FitRefused(f"the fit gives the engine model's {name} a negative cost "
                             f"({value:.3g} s), which no engine has: nothing written; run with "
                             "--shadow for more rounds, on a quiet machine")
    if not fit.held_out_error <= MAX_HELD_OUT_ERROR:
        raise FitRefused(f"the fitted engine model misses the rounds left out of the fit by "
                         f"{fit.held_out_error:.1%} (median; a fit must stay within "
                         f"{MAX_HELD_OUT_ERROR:.0%}): nothing written; run with --shadow for "
                         "more rounds, on a quiet machine")


def _fit_whole(timings, profiles, catalog, use) -> tuple[EngineConstants, list[str]]:
    rows = np.array([t.work for t in timings])[use]
    seconds = np.array([t.seconds for t in timings])[use]
    return fit_constants(rows, seconds), []


def _fit_profiled(timings, profiles, catalog, use) -> tuple[EngineConstants, list[str]]:
    """Per-tuple costs from the operator profiles of the rounds in ``use``, then the job,
    the join and the task-to-wall scale from their plan times (:mod:`operator_fit`)."""
    chosen = [t for t, keep in zip(timings, use) if keep]
    rounds = {(t.run, t.round) for t in chosen}
    work, seconds = stacked(profiles, lambda key: key[:2] in rounds)
    task_costs, known = fit_task_costs(work, seconds)
    if len(seconds) < known.sum():
        raise FitRefused(f"the runs' operator profiles hold {len(seconds)} timed pipelines "
                         f"for {int(known.sum())} per-tuple constants: run more rounds with "
                         "--shadow; nothing written")
    visits = spark_visits(chosen, profiles)
    known &= np.isfinite(visits)
    costs = np.where(known, task_costs * np.where(known, visits, 0.0), 0.0)
    job, join, scale, separable = fit_plan_scale(
        np.array([t.work for t in chosen]), np.array([t.seconds for t in chosen]), costs)
    values, notes = {"job": job, "join": join}, []
    if not separable:
        notes.append("join: every plan has as many joins per job, so the fixed cost of a "
                     "join cannot be told from the job's; it is folded into job")
    for i, name in enumerate(CONSTANTS):
        if name in PLAN_CONSTANTS:
            continue
        if known[i]:
            values[name] = scale * costs[i]
            if values[name] <= 0:
                notes.append(f"{name}: Spark's timings give it no measurable cost")
        else:
            values[name] = getattr(catalog.engine, name)
            notes.append(f"{name}: no operator of these runs has it; kept at "
                         f"{values[name]:.3g} s")
    notes.append(f"Spark's task seconds count {scale:.3g} wall seconds each")
    return EngineConstants(**{n: max(float(v), FLOOR) for n, v in values.items()}), notes


def spark_visits(timings: Sequence[Timing], profiles) -> np.ndarray:
    """Per constant, Spark's tuples over the model's, summed over the profiled timings.

    Spark handles a tuple more often than the model counts it (a join's input
    is shuffled, then built or probed; a query has several projections), so a
    per-tuple cost fitted on Spark's rows times this ratio is the model's.
    NaN where the model or Spark has no such tuples.
    """
    spark = np.zeros(len(CONSTANTS))
    model = np.zeros(len(CONSTANTS))
    for t in timings:
        records = profiles.get((t.run, t.round, t.plan))
        if records:
            spark += np.sum([record_work(r) for r in records], axis=0)
            model += t.work
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where((model > 0) & (spark > 0), spark / model, np.nan)


def _operator_error(profiles) -> float:
    """The per-operator fit's error on the pipelines of the rounds it was not fitted on:
    summed absolute miss over summed seconds, in Spark's task seconds."""
    train = stacked(profiles, lambda key: key[1] % 2 == 0)
    test = stacked(profiles, lambda key: key[1] % 2 == 1)
    if not len(train[1]) or not len(test[1]):
        train = test = stacked(profiles)
    costs, _ = fit_task_costs(*train)
    total = float(test[1].sum())
    return float(np.abs(test[0] @ costs - test[1]).sum() / total) if total > 0 else math.nan


def _vector(constants: EngineConstants) -> np.ndarray:
    return np.array([getattr(constants, n) for n in CONSTANTS])


def write_fitted_catalog(catalog: Catalog, fit: EngineFit, out: Path, where: str) -> Catalog:
    """A copy of ``catalog`` whose ``[engine]`` holds the fitted constants, written to ``out``."""
    from cqopt.spark.calibrate import write_catalog_text

    header = [f"# From {catalog.source}, with [engine] fitted to the plan times of {where}:"]
    header += [f"# {line}" for line in fit.summary_lines()]
    notes = {"engine": {n: f"was {getattr(catalog.engine, n):.3g}" for n in CONSTANTS}}
    return write_catalog_text(replace(catalog, engine=fit.constants), out, header, notes)
