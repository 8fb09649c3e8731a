"""The overload bounds of a live run, without Spark: PIPES' windows under a memory budget,
RTStream's negotiated level, and the driver's seeded sampling (cqopt.spark.run.overload).

The runs themselves are in test_streaming.py (shedding on the driver) and
test_workload_run.py (a negotiated, memory-bounded workload).
"""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from cqopt.charts.spec import workload_specs
from cqopt.charts.workload import workload_from_dict
from cqopt.replay.overload import chosen_memory
from cqopt.replay.replay import actual_statistics, local_chart
from cqopt.spark.run.driver_rows import sample_rows
from cqopt.spark.run.overload import Due, bound_batch, round_seconds
from cqopt.spark.run.settings import RunSettings

OBSERVED = {"rate.TCP": 400.0, "sel.TCP": 0.1}


@pytest.fixture(scope="module")
def chart(dec_catalog):
    """A chart of a selection on TCP (k = 4) and its cheapest plan at ``OBSERVED``."""
    ((spec, _),) = workload_specs(workload_from_dict({"query": [{
        "name": "S", "k": 4, "sql": "SELECT TCP.src_host FROM TCP WHERE TCP.dest_host = 2 "
                                    "WINDOW [1]"}]}), dec_catalog)
    return local_chart(spec, dec_catalog)


def _runners(chart, catalog, settings, windows, lines):
    def runner(window_s):
        ctx = SimpleNamespace(chart=chart, catalog=catalog, window_s=window_s,
                              settings=settings, say=lines.append)
        return SimpleNamespace(ctx=ctx, unreachable_said=False)
    return {name: runner(w) for name, w in windows.items()}


def _due(plan, rounds=(0,)):
    outcome = SimpleNamespace(plan_id=plan.id, plan=plan)
    return Due({r: outcome for r in rounds}, {r: dict(OBSERVED) for r in rounds}, None, None,
               7, {r: 0.0 for r in rounds}, 0.0)


@pytest.mark.parametrize("times, met", [(3.0, True), (1.2, True), (0.1, False)])
def test_windows_shrink_by_pipes_rule_only_when_the_plans_would_exceed_the_budget(
        chart, dec_catalog, times, met):
    """Two queries (W = 1 s and 2 s) each hold m bytes at full windows. A budget of 3m
    leaves them whole; 1.2m shrinks both to one fraction f of [W/4, W], the largest with
    2m (1/4 + 3f/4) <= 1.2m, f = 7/15; 0.1m cannot be met: every window at its least."""
    plan = chart.plans[0]
    stats = actual_statistics(chart, pd.DataFrame([OBSERVED]))
    m = float(chosen_memory(chart, dec_catalog, stats, np.array([0]))[0])
    assert m > 0
    lines: list[str] = []
    settings = RunSettings(memory_budget=times * m)
    runners = _runners(chart, dec_catalog, settings, {"A": 1.0, "B": 2.0}, lines)
    dues = {"A": _due(plan), "B": _due(plan, rounds=(0, 1))}
    bound_batch(runners, dues)
    fraction = {3.0: 1.0, 1.2: 7 / 15, 0.1: 0.0}[times]
    for name, w in (("A", 1.0), ("B", 2.0)):
        window = dues[name].window
        assert window["fraction"] == pytest.approx(fraction, abs=1e-5)
        assert window["window_s"] == pytest.approx(w * (0.25 + 0.75 * fraction), abs=1e-5)
        assert window["memory_before"] == pytest.approx(2 * m) and window["met"] is met
        assert window["memory_after"] == pytest.approx(2 * m * (0.25 + 0.75 * fraction),
                                                       rel=1e-4)
        assert not dues[name].shares  # no deadline: nothing negotiated
    assert bool(lines) is (times < 2), lines  # said when the windows shrink, not otherwise
    if times < 2:
        assert "micro-batch 7" in lines[0] and "over the" in lines[0]


def test_the_rounds_due_are_negotiated_to_one_level_that_meets_every_deadline(
        chart, dec_catalog):
    """Without the job's fixed cost a round's seconds grow with the share kept, s·p. Query
    A has two rounds due (deadlines D and 2D), B one (D): the first D holds A's first round
    and B's, so the level is the largest p, in steps of 0.01, with (s_A + s_B)·p <= D;
    every round keeps that share and logs the level."""
    catalog = dataclasses.replace(dec_catalog, engine=dataclasses.replace(
        dec_catalog.engine, job=0.0))
    from cqopt.costmodel import make_model

    engine = make_model("engine", catalog)
    plan = chart.plans[0]
    full = float(engine.seconds(plan, {k: np.array([v]) for k, v in OBSERVED.items()})[0])
    deadline = 0.61 * full  # two rounds of one full each share it: p = 0.3
    settings = RunSettings(deadline=deadline, negotiate=True, min_kept=0.1)
    lines: list[str] = []
    runners = _runners(chart, catalog, settings, {"A": 1.0, "B": 1.0}, lines)
    for runner in runners.values():
        runner.round_model = lambda plan, observed, local, share: round_seconds(
            engine, plan, observed, 1.0, scan=0.0, share=share)
    dues = {"A": _due(plan, rounds=(0, 1)), "B": _due(plan)}
    bound_batch(runners, dues)
    shares = [due.shares[r] for due in dues.values() for r in due.outcomes]
    levels = {s["level"] for s in shares}
    assert len(shares) == 3 and len(levels) == 1 and levels.pop() == pytest.approx(0.3)
    for s in shares:
        assert s["kept"] == s["level"] and s["met"] and not s["unreachable"]
        assert s["predicted_after_s"] == pytest.approx(0.3 * full, rel=1e-9)
        assert s["dropped"] == pytest.approx(0.7 * OBSERVED["rate.TCP"])
    assert "3 rounds negotiated to QoS level 0.30" in lines[0]
    # A deadline not even the least share meets: every round at it, the misses counted.
    settings = dataclasses.replace(settings, deadline=0.05 * full)
    for runner in runners.values():
        runner.ctx.settings = settings
    dues = {"A": _due(plan, rounds=(0, 1)), "B": _due(plan)}
    bound_batch(runners, dues)
    shares = [due.shares[r] for due in dues.values() for r in due.outcomes]
    levels = {s["level"] for s in shares}
    assert len(levels) == 1 and levels.pop() == pytest.approx(0.1) and not shares[0]["met"]
    assert any(s["unreachable"] for s in shares)


def test_the_driver_samples_each_tuple_alike_for_one_seed():
    """Bernoulli per tuple: the share kept is p within its spread, the same seed keeps the
    same tuples (a rerun gives the same answers), another seed others."""
    rows = pa.table({"ts": np.arange(20_000) / 1e4, "_round": np.zeros(20_000, dtype=np.int64)})
    kept = sample_rows(rows, 0.3, seed=5)
    assert abs(kept.num_rows - 6000) <= 4 * (20_000 * 0.3 * 0.7) ** 0.5
    assert kept.equals(sample_rows(rows, 0.3, seed=5))
    assert not kept.equals(sample_rows(rows, 0.3, seed=6))
    assert sample_rows(rows, 1.0, seed=5) is rows and sample_rows(rows, 0.0, seed=5).num_rows == 0
