"""Verdicts in the unit a user pays: measured, predicted or the model's utility, worded once.

The run's verdicts are judged on round records shaped as ``cqopt run`` logs them
(``log/round-*.json``), without Spark; the fidelity side on replays of the
example's charts, with the engine model's chart scored in predicted seconds.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from cqopt.catalog.catalog import EngineConstants
from cqopt.charts.spec import workload_specs
from cqopt.charts.workload import load_workload
from cqopt.cli.main import main
from cqopt.costmodel.engine import Engine
from cqopt.replay.replay import actual_statistics, local_chart, replay
from cqopt.replay.report import headline
from cqopt.replay.verdict import (
    MEASURED,
    agreement,
    engine_seconds,
    measured_verdict,
    predicted_verdict,
    replay_verdict,
    run_verdict,
)

# The comparison every verdict makes, in the same words whatever its unit.
COMPARISON = re.compile(r"(cheaper|dearer) than the best fixed plan (\S+) by ([\d.]+)%, "
                        r"in ([^,;]+)")
PREDICTED = "predicted seconds (engine model)"


def record(r: int, plan: str, seconds: float, shadow: dict[str, float] | None = None,
           observed: dict[str, float] | None = None) -> dict:
    """A round as cqopt run logs it (spark/streaming.py's _log_round)."""
    observed = observed or {"rate.TCP": 500.0, "sel.TCP": 0.2}
    return {"round": r, "start": float(r), "end": float(r + 1), "rows_in": {"TCP": 500},
            "empty": False, "observed": observed, "estimate": dict(observed), "cell": [0, 0],
            "plan": plan, "chart_plan": plan, "move": False, "switch": False, "rows_out": 10,
            "plan_seconds": seconds, "statistics_seconds": 0.01, "deadline": None,
            "grouped_rounds": 1, "shadow_seconds": shadow or {}, "batch": r, "lag_s": 0.0,
            "finished_at": 0.0}


def test_a_chart_slower_than_a_fixed_plan_is_said_so_in_measured_seconds():
    # The chart ran A every round; B was faster in total (the README example's shape).
    # The chart ran A every round; B and C were faster in total.
    rounds = [record(r, "A", 0.21, {"A": 0.21, "B": 0.19, "C": 0.25 if r % 2 else 0.15})
              for r in range(20)]
    v = measured_verdict(rounds)
    assert v["unit"] == MEASURED and v["outcome"] == "loses"
    assert v["chart_seconds"] == pytest.approx(4.2)
    assert v["best_fixed_seconds"] == pytest.approx(3.8)
    assert v["fastest_seconds"] == pytest.approx(3.4)
    assert v["best_fixed_plan"] == "B" and v["slower_than"] == ["B", "C"]
    assert v["text"] == ("the chart does not pay: it is dearer than the best fixed plan B by "
                         "10.5%, in measured seconds on Spark")
    assert "slower than 2 of the 3 fixed plans, B (3.800 s), C (4.000 s)" in v["line"]
    assert "the chart's plan was the fastest in 0 of 20 rounds" in v["line"]
    # One plan fastest in every round: no chart can help, and the chart's loss is still said.
    v = measured_verdict([record(r, "A", 0.21, {"A": 0.21, "B": 0.19}) for r in range(5)])
    assert v["outcome"] == "no headroom" and v["slower_than"] == ["B"]
    assert "dearer than the best fixed plan B by 10.5%, in measured seconds" in v["text"]
    assert "slower than 1 of the 2 fixed plans" in v["line"]


def test_a_chart_that_switches_well_beats_every_fixed_plan_measured():
    # A is fast in even rounds, B in odd ones; the chart ran the fastest 9 times of 10.
    times = [{"A": 1.0, "B": 2.0} if r % 2 == 0 else {"A": 2.0, "B": 1.0} for r in range(10)]
    plans = ["A" if r % 2 == 0 else "B" for r in range(10)]
    plans[3] = "A"  # one miss
    v = measured_verdict([record(r, p, t[p], t) for r, (p, t) in enumerate(zip(plans, times))])
    assert v["outcome"] == "wins" and v["slower_than"] == []
    assert v["chart_seconds"] == 11.0 and v["fastest_seconds"] == 10.0
    assert v["best_fixed_seconds"] == 15.0  # A and B tie; the first is taken
    # regret 0.1 against the best fixed plan's 0.5: a fifth of it
    assert v["regret_ratio"] == pytest.approx(0.2)
    assert "a regret ratio of 0.20" in v["line"] and "fastest in 9 of 10 rounds" in v["line"]
    assert COMPARISON.search(v["text"]).groups() == ("cheaper", "A", "26.7", MEASURED)


def test_rounds_that_timed_no_plan_give_no_measured_verdict():
    assert measured_verdict([record(0, "A", 0.2), record(1, "A", 0.3)]) is None
    # A run that timed some rounds is judged on those alone.
    v = measured_verdict([record(0, "A", 9.0), record(1, "A", 0.3, {"A": 0.3, "B": 0.4})])
    assert v["rounds"] == 1 and v["outcome"] == "no headroom"


@pytest.fixture(scope="module")
def q2(examples, dec_catalog):
    """Q2's chart (a three-way join, k = 4) of the OM model, and of the engine model."""
    workload = load_workload(examples / "workload.toml")
    spec = dict((s.name, s) for s, _ in workload_specs(workload, dec_catalog, {"k": 4}))["Q2"]
    engine = replace(spec, model="engine", weights=(0.0, 0.0, 1.0))
    return local_chart(spec, dec_catalog), local_chart(engine, dec_catalog)


STATISTICS = ("rate.TCP", "rate.UDP", "rate.SF", "sel.TCP")


def observed_rounds(n: int = 40, scale: float = 30.0) -> pd.DataFrame:
    """Rates that swap which stream is busiest, so the plans' costs cross; at 30 times the
    catalog's rates the joins, not the job's fixed cost, set the engine model's seconds."""
    t = np.arange(n)
    return pd.DataFrame({"round": t, "start": t * 1.0,
                         "rate.TCP": scale * (550 + 450 * np.sin(t / 6)),
                         "rate.UDP": scale * (550 - 450 * np.sin(t / 6)),
                         "rate.SF": scale * (300 + 200 * np.cos(t / 5)),
                         "sel.TCP": np.clip(0.5 + 0.45 * np.sin(t / 4), 0.01, 1)})


def observed_at(frame: pd.DataFrame, r: int) -> dict[str, float]:
    return {k: float(frame[k][r]) for k in STATISTICS}


def test_without_timings_the_run_is_judged_by_the_engine_models_prediction(q2, dec_catalog):
    om, _ = q2
    frame = observed_rounds(12)
    plans = [p.id for p in om.plans]
    rounds = [record(r, plans[r % 2], 0.5 + 0.01 * r, observed=observed_at(frame, r))
              for r in range(12)]
    predicted = engine_seconds(om, dec_catalog, rounds)
    # one prediction per plan and round, from the engine model at each round's statistics
    stats = actual_statistics(om, frame)
    assert predicted.shape == (len(plans), 12)
    assert predicted[1] == pytest.approx(Engine(dec_catalog).seconds(om.plans[1], stats))
    v = predicted_verdict(rounds, plans, predicted, "the engine model at its default constants")
    assert v["unit"] == PREDICTED and COMPARISON.search(v["text"]).group(4) == PREDICTED
    assert v["measured_seconds"] == pytest.approx(sum(0.5 + 0.01 * r for r in range(12)))
    assert v["line"].startswith("Predicted, not measured")
    assert f"{v['measured_seconds']:.3f} s measured" in v["line"]
    assert "at its default constants" in v["line"]
    # The run's report leads with it when no round timed the others.
    run = run_verdict(rounds, chart=om, catalog=dec_catalog)
    assert run["kind"] == "predicted" and run["lines"][0].startswith("- **verdict**: Predicted")
    assert run["model"] is None and run["agreement"] is None
    model = replay("Q2", om, dec_catalog, frame, estimator="last").summary
    run = run_verdict(rounds, model, chart=om, catalog=dec_catalog)
    # beside a prediction the chart's model was not checked: its note says what to run
    assert run["lines"][1].endswith("not checked against Spark: run `cqopt run --shadow` to "
                                    "measure")


def test_the_run_report_says_whether_the_model_and_spark_agree(q2, dec_catalog):
    om, _ = q2
    frame = observed_rounds(40, scale=1.0)  # within the chart's ranges: it switches
    model = replay("Q2", om, dec_catalog, frame, estimator="last")
    judged = replay_verdict(model.summary)
    assert judged["outcome"] == "wins" and judged["unit"] == "the OM model's utility"
    ran = model.rounds["plan"].tolist()  # the plans the run chose, as the model replays them
    assert len(set(ran)) > 1

    def timed(chosen: float) -> list[dict]:
        """The chart's plan takes ``chosen`` s; each other plan 0.2 s or 0.3 s by turns."""
        return [record(r, ran[r], chosen, {p.id: chosen if p.id == ran[r] else
                                           0.2 + 0.1 * ((i + r) % 2)
                                           for i, p in enumerate(om.plans)},
                       observed=observed_at(frame, r))
                for r in range(40)]

    # Spark times the chart's plan the slowest of every round: measured, the chart does
    # not pay, where the model said it does (the README example's shape).
    run = run_verdict(timed(0.35), model.summary, chart=om, catalog=dec_catalog)
    assert run["kind"] == "measured" and run["verdict"]["outcome"] == "loses"
    assert set(run["verdict"]["slower_than"]) == {p.id for p in om.plans}
    assert run["lines"][0].startswith("- **verdict**: Measured on Spark over 40 rounds")
    assert "slower than 3 of the 3 fixed plans" in run["lines"][0]
    assert run["lines"][1].startswith("- the chart's model on the same rounds: the chart "
                                      "pays: it is cheaper than the best fixed plan")
    assert run["lines"][1].endswith("in the OM model's utility")
    assert run["agreement"].startswith("The chart's model and Spark disagree: in the OM "
                                       "model's utility the chart is cheaper than")
    assert run["agreement"].endswith("trust the measured seconds")
    assert run["lines"][2] == f"- {run['agreement']}"
    # Both make the same comparison in the same words; only the unit differs.
    said = [COMPARISON.search(v["text"]).groups() for v in (run["verdict"], judged)]
    assert [g[0] for g in said] == ["dearer", "cheaper"]
    assert [g[3] for g in said] == [MEASURED, "the OM model's utility"]
    # Spark times it the fastest: the two agree that it pays.
    run = run_verdict(timed(0.1), model.summary, chart=om, catalog=dec_catalog)
    assert run["verdict"]["outcome"] == "wins" and run["verdict"]["slower_than"] == []
    assert run["agreement"].startswith("The chart's model and Spark agree")


def test_a_chart_of_the_engine_model_scores_in_predicted_seconds(q2, dec_catalog):
    _, engine_chart = q2
    frame = observed_rounds()
    r = replay("Q2", engine_chart, dec_catalog, frame, estimator="last")
    s = r.summary
    assert s["unit"] == PREDICTED and not s["unit_checked"]
    assert "not checked against Spark" in s["unit_note"]
    assert "cqopt calibrate --from-run" in s["unit_note"]
    assert f"in {PREDICTED}" in replay_verdict(s)["text"]
    assert PREDICTED in headline(s)
    # Its totals are the engine model's seconds: BEST-STATIC's regret (the headroom) is the
    # best fixed plan's predicted seconds over the fastest plan's per round, minus 1.
    engine = Engine(dec_catalog)
    stats = actual_statistics(engine_chart, frame)
    seconds = np.stack([np.broadcast_to(engine.seconds(p, stats), (len(frame),))
                        for p in engine_chart.plans])
    assert s["headroom"] == pytest.approx(seconds.sum(axis=1).min() / seconds.min(axis=0).sum()
                                          - 1, rel=1e-9)
    # With constants fitted to this engine (the catalog's [engine] table), it is checked.
    fitted = replace(dec_catalog, engine=EngineConstants(job=0.2, scan=2e-6))
    s = replay("Q2", engine_chart, fitted, frame, estimator="last").summary
    assert s["unit_checked"] and s["unit_note"] == (f"{PREDICTED} at the catalog's [engine] "
                                                    "constants")
    assert "Unit:" not in headline(s)


def test_the_console_names_the_verdicts_unit(q2, dec_catalog, dec_toml, workload_toml,
                                             monkeypatch, tmp_path, capsys):
    """``cqopt fidelity``'s console lines and --json, without Spark (the replay is given)."""
    om, engine_chart = q2
    replays = {"Q2": replay("Q2", om, dec_catalog, observed_rounds(), estimator="last"),
               "Q2E": replay("Q2E", engine_chart, dec_catalog, observed_rounds(),
                             estimator="last")}
    monkeypatch.setattr("cqopt.api.fidelity", lambda *args, **kwargs: replays)
    argv = ["fidelity", "--catalog", dec_toml, "--workload", workload_toml, "--traces",
            str(tmp_path), "--out", str(tmp_path / "report"), "--quiet"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "in the OM model's utility (regret" in out
    assert ("Unit: the OM model's utility at the paper's operator rates; not checked against "
            "Spark: run `cqopt run --shadow` to measure") in out
    assert f"in {PREDICTED} (regret" in out or f"in {PREDICTED}, and" in out
    assert main(argv + ["--json"]) == 0
    table = json.loads(capsys.readouterr().out)["queries"]
    assert table["Q2"]["unit"] == table["Q2"]["verdict"]["unit"] == "the OM model's utility"
    assert table["Q2E"]["verdict"]["unit"] == PREDICTED
    assert table["Q2"]["verdict"]["text"] in out  # the console's words, the same


def test_the_run_report_leads_with_its_verdict_and_an_all_shed_alarm(q2, dec_catalog):
    """cqopt run's report.md opens with the verdict in its unit; a run whose every round
    was shed whole opens with an ALARM, before anything that reads like success."""
    from cqopt.spark.run.report import report_markdown, summarize

    om, _ = q2
    frame = observed_rounds(6)
    plans = [p.id for p in om.plans]
    timed = [record(r, plans[0], 1.0, {p: 1.0 + 0.1 * i for i, p in enumerate(plans)},
                    observed_at(frame, r)) for r in range(6)]
    summary = summarize("Q2", om, dec_catalog, timed)
    text = report_markdown(summary)
    body = text.split("\n", 2)[2]
    assert body.startswith("- **verdict**: Measured on Spark") and "measured seconds" in body
    shed = [{**rec, "shadow_seconds": {}, "deadline": {
        "seconds": 0.5, "kept": 0.0, "dropped": 500.0, "predicted_s": 2.0, "missed": False}}
        for rec in timed]
    summary = summarize("Q2", om, dec_catalog, shed)
    assert summary["deadline"]["all_shed_rounds"] == 6
    body = report_markdown(summary).split("\n", 2)[2]
    assert body.startswith("- **ALARM**: Q2 answered nothing: every tuple was shed in all 6")
