"""The engine model's constants fitted to the plan times ``cqopt run`` measured.

Every round a run logs the chosen plan's wall time (``plan_seconds``), and
with ``--shadow`` every candidate plan's (``shadow_seconds``), beside the
round's observed statistics. :func:`fit_runs` turns each (plan, round) into
the model's work at those statistics (:func:`cqopt.costmodel.engine.work`)
and fits the constants (:func:`~cqopt.costmodel.engine.fit_constants`), as
RTStream profiles each operator's cost from execution (seed 000, section
4.1); constants a catalog already had from an earlier fit are smoothed
exponentially toward the new ones.

The model's error is reported out of sample: the constants are fitted on
the even rounds and judged on the odd ones (median absolute relative error,
per plan and overall); the constants written are then fitted on every round.
Rounds grouped with others (a backlog run plan by plan) share one job's time
and are left out, as are rounds without tuples.
"""

from __future__ import annotations

import json
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
from cqopt.errors import CqoptError
from cqopt.optimizer.query.logical import parse_query
from cqopt.optimizer.rules.enumerate import enumerate_plans


class EngineFitError(CqoptError):
    """A run folder cannot be read for plan times, or holds too few of them."""


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

    def summary_lines(self) -> list[str]:
        """The fit in words, for the console and the catalog's comment."""
        plans = len({t.plan for t in self.timings})
        runs = len({t.run for t in self.timings})
        lines = [f"{len(self.timings)} plan times of {plans} plans from {runs} run(s); median "
                 f"absolute error {self.held_out_error:.1%} on rounds left out of the fit "
                 f"(odd rounds), {self.in_sample_error:.1%} in sample"]
        lines += [f"  {plan}: {error:.1%}" for plan, error in self.error_by_plan.items()]
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
        state = json.loads((folder / "state.json").read_text(encoding="utf-8"))
        sql, name = state["sql"], state["query"]
    except (OSError, ValueError, KeyError, TypeError):
        raise EngineFitError(f"--from-run {folder}: not a cqopt run folder (no readable "
                             "state.json); pass the --out of a cqopt run") from None
    try:
        plans = {p.id: p for p in enumerate_plans(parse_query(sql, catalog))}
    except CqoptError as err:
        raise EngineFitError(f"--from-run {folder}: its query {name} does not fit "
                             f"--catalog {catalog.source}: {err}") from None
    model = make_model("engine", catalog)

    def work_row(plan_id: str, record: dict[str, Any]) -> np.ndarray | None:
        plan = plans.get(plan_id)
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
        record = json.loads(path.read_text(encoding="utf-8"))
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


def fit_runs(runs: Sequence[str | Path], catalog: Catalog, *, alpha: float = 0.5) -> EngineFit:
    """The engine constants fitted to the plan times of ``runs``, smoothed into the
    catalog's where it holds fitted ones (``alpha`` the new fit's weight).

    Raises
    ------
    EngineFitError
        A folder is not a run, or the runs hold fewer than 4 usable plan times.
    """
    timings = [t for run in runs for t in read_timings(run, catalog)]
    if len(timings) < 4:
        raise EngineFitError(f"the runs given hold {len(timings)} usable plan times; the "
                             "engine model needs at least 4 (run more rounds, or with "
                             "--shadow, which times every plan)")
    rows = np.array([t.work for t in timings])
    seconds = np.array([t.seconds for t in timings])
    even = np.array([t.round % 2 == 0 for t in timings])
    held = fit_constants(rows[even], seconds[even]) if even.sum() >= 2 and (~even).any() \
        else fit_constants(rows, seconds)
    test = ~even if (~even).any() else even
    errors = np.abs(rows @ _vector(held) - seconds) / seconds
    fitted = fit_constants(rows, seconds)
    fitted_from = {f.name for f in fields(EngineConstants)
                   if getattr(catalog.engine, f.name) != f.default}
    if fitted_from:  # the catalog holds an earlier fit: smooth toward the new one
        fitted = smoothed(catalog.engine, fitted, alpha)
    by_plan = {}
    for plan in dict.fromkeys(t.plan for t in timings):
        mine = np.array([t.plan == plan for t in timings]) & test
        if mine.any():
            by_plan[plan] = float(np.median(errors[mine]))
    in_sample = np.abs(rows @ _vector(fitted) - seconds) / seconds
    return EngineFit(fitted, tuple(timings), float(np.median(errors[test])), by_plan,
                     float(np.median(in_sample)))


def _vector(constants: EngineConstants) -> np.ndarray:
    return np.array([getattr(constants, n) for n in CONSTANTS])


def write_fitted_catalog(catalog: Catalog, fit: EngineFit, out: Path, where: str) -> Catalog:
    """A copy of ``catalog`` whose ``[engine]`` holds the fitted constants, written to ``out``."""
    from cqopt.spark.calibrate import write_catalog_text

    header = [f"# From {catalog.source}, with [engine] fitted to the plan times of {where}:"]
    header += [f"# {line}" for line in fit.summary_lines()]
    notes = {"engine": {n: f"was {getattr(catalog.engine, n):.3g}" for n in CONSTANTS}}
    return write_catalog_text(replace(catalog, engine=fit.constants), out, header, notes)
