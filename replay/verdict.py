"""Verdicts in the unit a user pays: one wording for the fidelity report and the run's.

A verdict compares the chart's plans, in total over the rounds, with the best
fixed plan in hindsight (the one plan of lowest total) and names the unit the
totals are in, which is one of three:

- the chart's model's utility (``"the OM model's utility"``): what OM and
  PIPES charts cost with, a number that is not time;
- ``"predicted seconds (engine model)"``: a chart of the engine model, whose cost
  is its predicted seconds (:meth:`~cqopt.costmodel.registry.ModelEntry.verdict_unit`
  says which, from the model's registry entry and the chart's weights);
- ``"measured seconds on Spark"``: a run that timed every plan (``cqopt run --shadow``).

:func:`judge` words every verdict, so the fidelity report and the run report
say the same thing in the same words and a reader can set them side by side:
"cheaper/dearer than the best fixed plan X by N%, in UNIT".
:func:`model_note` says how far a chart's unit can be trusted (a model never
checked against Spark says so, and what to run). :func:`measured_verdict`
and :func:`predicted_verdict` judge a run from its round log (the records
``cqopt run`` writes under ``log/``); :func:`agreement` says whether the
chart's model and the measurement agree.

>>> judge(-0.242, 0.3, "TCP[σπ]", "the OM model's utility")["text"]
"the chart pays: it is cheaper than the best fixed plan TCP[σπ] by 24.2%, in the OM model's utility"
>>> judge(0.117, 0.2, "TCP[πσ]", MEASURED)["text"]
'the chart does not pay: it is dearer than the best fixed plan TCP[πσ] by 11.7%, in measured seconds on Spark'
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from cqopt.costmodel import model_entry
from cqopt.replay.baselines import NO_HEADROOM

MEASURED = "measured seconds on Spark"
EVEN = 0.0005  # within 0.05% of the best fixed plan's total: the same
SHADOW = "cqopt run --shadow"


def chart_unit(spec) -> str:
    """The unit a verdict on ``spec``'s chart is in: its model's, for its weights.

    >>> from types import SimpleNamespace as S
    >>> chart_unit(S(model="om", weights=(0.4, 0.6)))
    "the OM model's utility"
    >>> chart_unit(S(model="engine", weights=(0.0, 0.0, 1.0)))
    'predicted seconds (engine model)'
    """
    return model_entry(spec.model).verdict_unit(spec.weights)


def model_note(spec, catalog) -> dict[str, Any]:
    """How far ``spec``'s unit can be trusted: ``{unit, checked, text}``.

    ``checked`` is true for a chart whose cost is predicted seconds at constants
    the catalog sets (``cqopt calibrate --from-run`` fits them to a run); every
    other chart says it was never checked against Spark, and what to run.

    >>> from dataclasses import replace
    >>> from cqopt.catalog import load_catalog
    >>> from cqopt.charts.spec import workload_specs
    >>> from cqopt.charts.workload import load_workload
    >>> from cqopt.examples import example
    >>> cat = load_catalog(example("dec-pkt.toml"))
    >>> spec = workload_specs(load_workload(example("workload.toml")), cat)[0][0]
    >>> model_note(spec, cat)["text"]
    "the OM model's utility at the paper's operator rates; not checked against Spark: run `cqopt run --shadow` to measure"
    >>> engine = replace(spec, model="engine", weights=(0.0, 0.0, 1.0))
    >>> model_note(engine, cat)["checked"]  # the engine model at its default constants
    False
    """
    entry = model_entry(spec.model)
    unit = entry.verdict_unit(spec.weights)
    sections = sorted({c.source for c in spec.cost_model(catalog).constants().values()
                       if c.source.startswith("catalog [")})
    at = (f"the catalog's {', '.join(s.removeprefix('catalog ') for s in sections)} constants"
          if sections else entry.defaults)
    seconds = unit == entry.unit
    if seconds and sections:
        return {"unit": unit, "checked": True, "text": f"{unit} at {at}"}
    if seconds:
        return {"unit": unit, "checked": False,
                "text": f"{unit} at {at}; not checked against Spark: run `{SHADOW}`, then "
                        "`cqopt calibrate --from-run RUN` to fit them"}
    return {"unit": unit, "checked": False,
            "text": f"{unit} at {at}; not checked against Spark: run `{SHADOW}` to measure"}


def against_best_fixed(change: float, plan: str, unit: str) -> str:
    """The chart's total against the best fixed plan's, in one clause that names the unit.

    ``change`` is the chart's total over the best fixed plan's, minus 1.

    >>> against_best_fixed(-0.05, "P", "the OM model's utility")
    "cheaper than the best fixed plan P by 5.0%, in the OM model's utility"
    >>> against_best_fixed(0.0001, "P", MEASURED)
    'as cheap as the best fixed plan P (within 0.05%), in measured seconds on Spark'
    """
    if not math.isfinite(change):
        return f"not comparable with the best fixed plan {plan} (a total is not finite), in {unit}"
    if abs(change) < EVEN:
        return f"as cheap as the best fixed plan {plan} (within 0.05%), in {unit}"
    return (f"{'cheaper' if change < 0 else 'dearer'} than the best fixed plan {plan} by "
            f"{abs(change):.1%}, in {unit}")


def judge(change: float, headroom: float, plan: str, unit: str) -> dict[str, Any]:
    """A verdict: ``{outcome, text, change, plan, unit}``.

    ``outcome`` is ``wins``, ``loses``, ``even`` (within 0.05%), ``no headroom``
    (the best fixed plan within 0.1% of the per-round optimum: no chart can
    help) or ``undefined``; ``text`` is one sentence without its full stop.

    Parameters
    ----------
    change : float
        The chart's total over the best fixed plan's, minus 1 (negative: cheaper).
    headroom : float
        The best fixed plan's total over the per-round optimum's, minus 1.
    plan : str
        The best fixed plan's id.
    unit : str
        What the totals count (:func:`chart_unit`, or :data:`MEASURED`).

    Examples
    --------
    >>> judge(0.02, 0.0004, "P", MEASURED)["text"]
    'no chart can help here: the chart is dearer than the best fixed plan P by 2.0%, in measured seconds on Spark, and P is within 0.1% of the per-round optimum; run P'
    """
    clause = against_best_fixed(change, plan, unit)
    if not math.isfinite(change):
        outcome, text = "undefined", f"no verdict: the chart is {clause}"
    elif headroom < NO_HEADROOM:
        outcome = "no headroom"
        text = (f"no chart can help here: the chart is {clause}, and {plan} is within 0.1% "
                f"of the per-round optimum; run {plan}")
    elif abs(change) < EVEN:
        outcome, text = "even", f"switching gains nothing here: the chart is {clause}"
    elif change < 0:
        outcome, text = "wins", f"the chart pays: it is {clause}"
    else:
        outcome, text = "loses", f"the chart does not pay: it is {clause}"
    return {"outcome": outcome, "text": text, "change": float(change), "plan": plan,
            "unit": unit}


def replay_verdict(summary: Mapping[str, Any]) -> dict[str, Any]:
    """The verdict of a replay's summary (:func:`cqopt.replay.replay.replay`), in its unit.

    >>> s = {"regret": 0.01, "headroom": 0.30, "unit": "the OM model's utility",
    ...      "baselines": {"best_static": {"plan": "P"}}}
    >>> replay_verdict(s)["text"]
    "the chart pays: it is cheaper than the best fixed plan P by 22.3%, in the OM model's utility"
    """
    change = (1.0 + summary["regret"]) / (1.0 + summary["headroom"]) - 1.0
    return judge(change, summary["headroom"], summary["baselines"]["best_static"]["plan"],
                 summary["unit"])


def _totals(times: np.ndarray, chosen: np.ndarray, plans: Sequence[str]) -> dict[str, Any]:
    """Totals of a (rounds, plans) table of seconds: the chart's, each plan's, the fastest."""
    per_plan = times.sum(axis=0)
    best = int(per_plan.argmin())
    chart = float(times[np.arange(len(times)), chosen].sum())
    fastest = float(times.min(axis=1).sum())
    regret = chart / fastest - 1.0 if fastest > 0 else math.nan
    headroom = float(per_plan[best]) / fastest - 1.0 if fastest > 0 else math.nan
    return {"rounds": int(len(times)), "chart_seconds": chart,
            "best_fixed_plan": plans[best], "best_fixed_seconds": float(per_plan[best]),
            "fastest_seconds": fastest,
            "per_plan": {p: float(s) for p, s in zip(plans, per_plan)},
            "change": chart / float(per_plan[best]) - 1.0 if per_plan[best] > 0 else math.nan,
            "regret": regret, "headroom": headroom,
            # the chart's regret as a share of the best fixed plan's (below 1: it switches
            # better than any one plan can run)
            "regret_ratio": regret / headroom if headroom > 0 else math.nan,
            "chart_fastest_rounds": int(np.sum(times[np.arange(len(times)), chosen]
                                               <= times.min(axis=1)))}


def measured_verdict(records: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """The run's verdict in measured seconds, from rounds that timed every plan.

    Each record is a round of ``cqopt run``'s log: its ``plan`` and its
    ``shadow_seconds`` (plan id to the seconds it took on the round, empty when
    the run did not time the others). Rounds that timed no plan are left out.

    Parameters
    ----------
    records : sequence of mapping
        The run's round records.

    Returns
    -------
    dict or None
        None without a timed round; else :func:`judge`'s verdict in
        :data:`MEASURED`, with the totals (``chart_seconds``,
        ``best_fixed_seconds``, ``fastest_seconds``, ``per_plan``), ``regret``,
        ``headroom``, ``regret_ratio``, ``slower_than`` (the fixed plans that
        took less in total than the chart's plans, fastest first) and ``line``,
        the verdict with its figures in words.

    Examples
    --------
    >>> rounds = [{"plan": "A", "shadow_seconds": {"A": 2.0, "B": 1.0}},
    ...           {"plan": "A", "shadow_seconds": {"A": 2.0, "B": 2.5}}]
    >>> v = measured_verdict(rounds)
    >>> v["outcome"], v["slower_than"], v["chart_seconds"], v["best_fixed_seconds"]
    ('loses', ['B'], 4.0, 3.5)
    >>> v["text"]
    'the chart does not pay: it is dearer than the best fixed plan B by 14.3%, in measured seconds on Spark'
    """
    timed = [r for r in records if r.get("shadow_seconds")]
    if not timed:
        return None
    plans = list(timed[0]["shadow_seconds"])
    times = np.array([[r["shadow_seconds"][p] for p in plans] for r in timed], dtype=float)
    chosen = np.array([plans.index(r["plan"]) for r in timed])
    totals = _totals(times, chosen, plans)
    verdict = {**totals, **judge(totals["change"], totals["headroom"],
                                 totals["best_fixed_plan"], MEASURED)}
    verdict["slower_than"] = sorted((p for p, s in totals["per_plan"].items()
                                     if s < totals["chart_seconds"] * (1 - EVEN)),
                                    key=totals["per_plan"].get)
    verdict["line"] = _measured_line(verdict, len(plans))
    return verdict


def _measured_line(v: Mapping[str, Any], plans: int) -> str:
    """The measured verdict and its figures, in sentences."""
    lines = [f"Measured on Spark over {v['rounds']} rounds that timed every plan: "
             f"{v['text']}."]
    slower = ", ".join(f"{p} ({v['per_plan'][p]:.3f} s)" for p in v["slower_than"])
    took = f"The chart's plans took {v['chart_seconds']:.3f} s"
    if v["slower_than"]:
        lines.append(f"{took}: slower than {len(v['slower_than'])} of the {plans} fixed "
                     f"plans, {slower}.")
    else:
        lines.append(f"{took}, the best fixed plan {v['best_fixed_plan']} "
                     f"{v['best_fixed_seconds']:.3f} s.")
    lines.append(f"The fastest plan of each round would have taken {v['fastest_seconds']:.3f} "
                 f"s; the chart's plan was the fastest in {v['chart_fastest_rounds']} of "
                 f"{v['rounds']} rounds.")
    if math.isfinite(v["regret_ratio"]):
        lines.append(f"Regret {v['regret']:.3f} against the best fixed plan's "
                     f"{v['headroom']:.3f}: a regret ratio of {v['regret_ratio']:.2f} "
                     "(below 1, switching beat every fixed plan).")
    return " ".join(lines)


def predicted_verdict(records: Sequence[Mapping[str, Any]], plans: Sequence[str],
                      predicted: np.ndarray, note: str = "") -> dict[str, Any] | None:
    """The run's verdict where only the chosen plans ran: the others' seconds predicted.

    Every plan, the chosen ones too, is judged by the engine model's prediction
    (so the totals compare like with like); the chosen plans' measured seconds
    (each record's ``plan_seconds``) stand beside their prediction.

    Parameters
    ----------
    records : sequence of mapping
        The run's round records (``plan``, ``plan_seconds``).
    plans : sequence of str
        The candidate plans' ids, in ``predicted``'s order.
    predicted : numpy.ndarray
        ``(plans, rounds)``: each plan's seconds on each round, by the engine
        model (:func:`engine_seconds`).
    note : str
        How the prediction was made (the engine model's constants), said with it.

    Returns
    -------
    dict or None
        None without a round; else :func:`judge`'s verdict in predicted seconds,
        the totals as :func:`measured_verdict` gives them, ``measured_seconds``
        (the chosen plans' measured total) and ``line``.

    Examples
    --------
    >>> rounds = [{"plan": "A", "plan_seconds": 1.1}, {"plan": "B", "plan_seconds": 0.9}]
    >>> v = predicted_verdict(rounds, ["A", "B"], np.array([[1.0, 2.0], [1.5, 1.0]]))
    >>> v["text"], v["measured_seconds"]
    ('the chart pays: it is cheaper than the best fixed plan B by 20.0%, in predicted seconds (engine model)', 2.0)
    """
    if not len(records):
        return None
    unit = model_entry("engine").unit
    times = np.asarray(predicted, dtype=float).T
    chosen = np.array([list(plans).index(r["plan"]) for r in records])
    totals = _totals(times, chosen, list(plans))
    verdict = {**totals, **judge(totals["change"], totals["headroom"],
                                 totals["best_fixed_plan"], unit)}
    verdict["measured_seconds"] = float(sum(r["plan_seconds"] for r in records))
    verdict["line"] = (
        f"Predicted, not measured (no round timed the other plans; `{SHADOW}` times them): "
        f"{verdict['text']}. The chart's plans took {verdict['measured_seconds']:.3f} s measured "
        f"({totals['chart_seconds']:.3f} s predicted); the engine model predicts "
        f"{totals['best_fixed_seconds']:.3f} s for the best fixed plan "
        f"{totals['best_fixed_plan']} and {totals['fastest_seconds']:.3f} s for the fastest "
        f"plan of each round{f' ({note})' if note else ''}.")
    grouped = sum(int(r.get("grouped_rounds", 1)) > 1 for r in records)
    joint = sum(int(r.get("joint_plans", 1)) > 1 for r in records)
    if grouped or joint:
        kinds = " or ".join(k for k, n in (("several rounds", grouped),
                                          ("several queries' plans", joint)) if n)
        shared = sum(int(r.get("grouped_rounds", 1)) > 1 or int(r.get("joint_plans", 1)) > 1
                     for r in records)
        verdict["line"] += (f" {shared} rounds ran in jobs of {kinds}: their measured "
                            "seconds are each a share of one job's.")
    return verdict


def agreement(measured: Mapping[str, Any], model: Mapping[str, Any]) -> str:
    """Whether the chart's model and the measurement agree on the chart, in one sentence.

    Both are :func:`judge` verdicts on the same rounds; they agree when both
    find the chart cheaper, or both find it no cheaper, than the best fixed plan.

    >>> m = judge(0.117, 0.2, "TCP[πσ]", MEASURED)
    >>> o = judge(-0.242, 0.3, "TCP[σπ]", "the OM model's utility")
    >>> agreement(m, o)
    "The chart's model and Spark disagree: in the OM model's utility the chart is cheaper than the best fixed plan TCP[σπ] by 24.2%, in measured seconds on Spark it is dearer than the best fixed plan TCP[πσ] by 11.7%; trust the measured seconds"
    """
    def cheaper(v: Mapping[str, Any]) -> bool:
        return math.isfinite(v["change"]) and v["change"] <= -EVEN

    said = (f"in {model['unit']} the chart is "
            f"{against_best_fixed(model['change'], model['plan'], model['unit'])}"
            .removesuffix(f", in {model['unit']}"))
    seen = (f"in {measured['unit']} it is "
            f"{against_best_fixed(measured['change'], measured['plan'], measured['unit'])}"
            .removesuffix(f", in {measured['unit']}"))
    if cheaper(measured) == cheaper(model):
        return f"The chart's model and Spark agree: {said}, {seen}"
    return f"The chart's model and Spark disagree: {said}, {seen}; trust the measured seconds"


def observed_rounds(records: Sequence[Mapping[str, Any]]):
    """The round records' observed statistics as a replay's rounds table (NaN where none)."""
    import pandas as pd

    return pd.DataFrame([{"round": r["round"], "start": r["start"],
                          **{k: (math.nan if v is None else v)
                             for k, v in r["observed"].items()}} for r in records])


def engine_seconds(chart, catalog, records: Sequence[Mapping[str, Any]],
                   engine=None) -> np.ndarray:
    """Each of ``chart``'s plans' seconds on each round, by the engine model: (plans, rounds).

    Parameters
    ----------
    chart : QueryChart
    catalog : Catalog
    records : sequence of mapping
        The run's round records (``round``, ``start``, ``observed``).
    engine : Engine, optional
        The engine model to predict with; default: at the catalog's constants.
    """
    from cqopt.costmodel.engine import Engine
    from cqopt.replay.replay import actual_statistics

    engine = engine if engine is not None else Engine(catalog)
    stats = actual_statistics(chart, observed_rounds(records))
    n = len(records)
    return np.stack([np.broadcast_to(np.asarray(engine.seconds(p, stats), dtype=float), (n,))
                     for p in chart.plans])


def run_verdict(records: Sequence[Mapping[str, Any]], model: Mapping[str, Any] | None = None,
                chart=None, catalog=None, engine=None) -> dict[str, Any] | None:
    """What a run's report leads with: its verdict, measured where plans were timed.

    With rounds that timed every plan (``cqopt run --shadow``), the verdict is
    :func:`measured_verdict`'s; otherwise :func:`predicted_verdict`'s, every
    plan's seconds predicted by the engine model (it needs ``chart`` and
    ``catalog``). The chart's model's own verdict on the same rounds (``model``,
    a replay's summary) follows, and, beside a measured verdict, whether the two
    agree (:func:`agreement`).

    Parameters
    ----------
    records : sequence of mapping
        The run's round records (``cqopt run``'s ``log/round-*.json``).
    model : mapping, optional
        :func:`cqopt.replay.replay.replay`'s summary of the same rounds.
    chart, catalog : optional
        The run's chart and catalog, for the engine model's prediction.
    engine : Engine, optional
        The engine model to predict with (default: the catalog's constants).

    Returns
    -------
    dict or None
        None without a round; else ``{kind, verdict, model, agreement, lines}``:
        ``kind`` is ``measured`` or ``predicted`` (or ``model`` where neither
        could be made), ``lines`` the report's Markdown list items, the verdict first.
    """
    if not records:
        return None
    verdict, kind = measured_verdict(records), "measured"
    if verdict is None and chart is not None and catalog is not None:
        from cqopt.costmodel.engine import Engine

        engine = engine if engine is not None else Engine(catalog)
        fitted = any(c.source.startswith("catalog [") for c in engine.constants().values())
        note = ("the engine model at the catalog's [engine] constants" if fitted else
                "the engine model at its default constants, not fitted to this engine")
        verdict, kind = predicted_verdict(records, [p.id for p in chart.plans],
                                          engine_seconds(chart, catalog, records, engine),
                                          note), "predicted"
    judged = replay_verdict(model) if model is not None else None
    lines = [f"- **verdict**: {verdict['line']}"] if verdict is not None else []
    if judged is not None:  # its unit's note, unless this run just checked it
        lines.append(f"- the chart's model on the same rounds: {judged['text']}"
                     + ("" if kind == "measured" and verdict is not None
                        else f"; unit: {model['unit_note']}"))
    said = None
    if kind == "measured" and verdict is not None and judged is not None:
        said = agreement(verdict, judged)
        lines.append(f"- {said}")
    return {"kind": kind if verdict is not None else "model", "verdict": verdict,
            "model": judged, "agreement": said, "lines": lines}
