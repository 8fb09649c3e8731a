"""A run's report: what the rounds logged add up to, as ``report.json``, ``report.md``
and ``rounds.csv``; a workload's, a section per query (:func:`workload_markdown`).

:func:`summarize` counts the plans run, switches and times; it replays the
rounds' observed statistics through the chart's model for the model's
fidelity and, where rounds were shadowed (every candidate plan timed), gives
the measured fidelity and regret against the fastest plan of each round
within a :class:`~cqopt.spark.run.settings.Tolerance`.

>>> measured_hit([0.50, 0.52, 0.90], chosen=1, tolerance=Tolerance())  # within 10%
True
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from cqopt.errors import CqoptError
from cqopt.output import write_atomic
from cqopt.replay.overload import shed_alarm
from cqopt.replay.verdict import observed_rounds, run_verdict
from cqopt.spark.run.roundlog import LAG_ROUNDS, lag_growth, rounds_table
from cqopt.spark.run.settings import RunContext, Tolerance
from cqopt.spark.run.sink import write_json
from cqopt.spark.run.state import RunState

if TYPE_CHECKING:
    from cqopt.catalog import Catalog
    from cqopt.charts.lookup import QueryChart


@dataclass
class RunResult:
    """What a run did: the round log (one row per round ever run in ``out``) and the report."""

    out: Path
    rounds: pd.DataFrame
    summary: dict[str, Any]
    stopped_by: str = "end of input"
    pending: list[int] = field(default_factory=list)


def measured_hit(seconds: list[float], chosen: int, tolerance: Tolerance) -> bool:
    """Whether plan ``chosen`` was measured fastest, within ``tolerance`` of the fastest."""
    fastest = min(seconds)
    return (seconds[chosen] <= fastest * (1 + tolerance.relative)
            or seconds[chosen] - fastest <= tolerance.absolute_s)


def write_report(ctx: RunContext, state: RunState, records: list[dict[str, Any]],
                 stopped_by: str) -> RunResult:
    """Write ``rounds.csv``, ``report.json``, ``report.md`` and its ``timeline.png`` for
    every logged round.

    Each alarm of the summary (a statistic the chart does not cover) is said too.
    """
    rounds = rounds_table(records)
    summary = summarize(ctx.name, ctx.chart, ctx.catalog, records,
                        tolerance=ctx.settings.tolerance, **ctx.settings.options)
    last = state.last_round(ctx.window_s)
    pending = [] if last is None else list(range(len(records), last + 1))
    summary.update({"stopped_by": stopped_by, "pending_rounds": pending, **state.dropped(),
                    "window_s": ctx.window_s, "start": state.start})
    for alarm in summary.get("shed_alarms", []):
        ctx.say(f"{ctx.name}: {alarm['severity']}: {alarm['message']}")
    for alarm in summary.get("alarms", []):
        ctx.say(f"{ctx.name}: warning: {alarm['message']}")
    write_atomic(ctx.out / "rounds.csv", rounds.to_csv(index=False))
    summary["timeline"] = write_timeline(ctx, records, rounds)
    write_json(ctx.out / "report.json", summary)
    write_atomic(ctx.out / "report.md", report_markdown(summary))
    return RunResult(ctx.out, rounds, summary, stopped_by, pending)


def write_timeline(ctx: RunContext, records: list[dict[str, Any]], rounds: pd.DataFrame
                   ) -> str:
    """Draw ``timeline.png`` beside the report (:mod:`cqopt.spark.run.timeline`), the
    chosen plans' predicted seconds by the engine model with it; what the report says of it:
    the file's name, or why there is none."""
    if not records:
        return "no timeline: no round ran"
    try:
        from cqopt.spark.run.timeline import timeline_figure
    except ModuleNotFoundError as err:
        return (f"no timeline: drawing it needs {err.name} (pip install 'cqopt[report]'); "
                "rounds.csv holds its numbers")
    import io

    from cqopt.replay.verdict import engine_seconds

    frame = rounds.copy()
    try:
        predicted = engine_seconds(ctx.chart, ctx.catalog, records)
        index = {plan.id: i for i, plan in enumerate(ctx.chart.plans)}
        frame["predicted:chosen"] = [predicted[index[rec["plan"]], i] if rec["plan"] in index
                                     else np.nan for i, rec in enumerate(records)]
    except CqoptError:  # a catalog the engine model cannot price: measured times only
        pass
    image = io.BytesIO()
    timeline_figure(frame, ctx.name).savefig(image, format="png", dpi=100)
    write_atomic(ctx.out / "timeline.png", image.getvalue())
    return "timeline.png"


def summarize(name: str, chart: QueryChart, catalog: Catalog, records: list[dict[str, Any]],
              *, tolerance: Tolerance = Tolerance(), **policy: Any) -> dict[str, Any]:
    """Plans run, switches, times; measured fidelity and regret; the model's fidelity.

    The model's fidelity replays the same rounds' observed statistics through
    :func:`cqopt.replay.replay.replay` (the chart's model costs every plan at
    each round's actual statistics), with the run's estimator and ``policy``
    (:func:`~cqopt.replay.replay.replay`'s options), so it judges the same
    choices the run made.
    """
    from cqopt.replay.replay import replay

    out: dict[str, Any] = {"query": name, "rounds": len(records),
                           "empty_rounds": sum(r["empty"] for r in records),
                           "tolerance": str(tolerance),
                           "plans_run": {}, "switches": sum(r["switch"] for r in records),
                           "moves": sum(r["move"] for r in records),
                           "off_chart_rounds": sum(bool(r.get("off_chart")) for r in records),
                           "plan_seconds_total": float(sum(r["plan_seconds"] for r in records)),
                           # older logs lack it: their statistics' cost is unknown, not 0
                           "statistics_seconds_total": float(sum(
                               r.get("statistics_seconds", math.nan) for r in records)),
                           "rows_out_total": int(sum(r["rows_out"] for r in records))}
    out["policy"] = {k: ("none" if v is None else str(v)) for k, v in policy.items()}
    lags = [float(r.get("lag_s") or 0.0) for r in records]
    out["lag_s"] = {"last": lags[-1] if lags else 0.0, "highest": max(lags, default=0.0)}
    out["lag_warnings"] = sum(lag_growth(lags[max(0, i - LAG_ROUNDS):i + 1]) >= LAG_ROUNDS
                              for i in range(len(lags)))
    for rec in records:
        out["plans_run"][rec["plan"]] = out["plans_run"].get(rec["plan"], 0) + 1
    if any(r.get("window") for r in records):
        out["memory"] = _memory_summary(records)
    if any(r.get("deadline") for r in records):
        out["deadline"] = _deadline_summary(records)
        d = out["deadline"]  # answers shed whole: an alarm on the first screen
        alarm = shed_alarm(d["all_shed_rounds"], d["rounds"], name, d["seconds"],
                           d["predicted_median_s"], "raise --deadline, or keep a share of each "
                           "round with --min-kept SHARE")
        out["shed_alarms"] = [alarm] if alarm else []
    if not records:
        return out
    model = replay(name, chart, catalog, observed_rounds(records), **policy)
    # Statistics the chart does not cover in more than 10% of the rounds (fidelity's alarms).
    out["alarms"] = model.summary.get("alarms", [])
    out["model"] = {"fidelity": model.summary["fidelity"], "regret": model.summary["regret"],
                    "undefined_rounds": model.summary["undefined_rounds"],
                    "optimal": model.rounds["optimal"].tolist()}
    shadowed = [r for r in records if r["shadow_seconds"]]
    if shadowed:
        out["measured"] = _measured_summary(shadowed, model.rounds, tolerance)
    # What the report leads with: measured seconds where plans were timed, else the
    # engine model's predicted seconds, each naming its unit (cqopt.replay.verdict).
    verdict = run_verdict(records, model.summary, chart, catalog)
    if verdict is not None:
        out["verdict"] = verdict
    return out


def _deadline_summary(records: list[dict[str, Any]]) -> dict[str, Any]:
    """What the deadline cost: rounds late (measured), rounds and tuples shed."""
    bounded = [r["deadline"] for r in records if r.get("deadline")]
    tuples = sum(sum(r["rows_in"].values()) for r in records if r.get("deadline"))
    return {"seconds": bounded[-1]["seconds"], "rounds": len(bounded),
            "missed": sum(d["missed"] for d in bounded),
            "shed_rounds": sum(d["kept"] < 1.0 for d in bounded),
            "unreachable_rounds": sum(bool(d.get("unreachable")) for d in bounded),
            "tuples_dropped": float(sum(d.get("dropped", 0.0) for d in bounded)),
            "tuples": int(tuples),
            "all_shed_rounds": sum(d["kept"] <= 0.0 for d in bounded),
            "shed_on_driver": sum(d.get("shed_on") == "driver" and d["kept"] < 1.0
                                  for d in bounded),
            "negotiation": _negotiation_summary(bounded),
            "shared_shedding": _shared_summary(bounded),
            "predicted_median_s": float(np.nanmedian([np.nan if d.get("predicted_s") is None
                                                      else d["predicted_s"] for d in bounded]
                                                     or [np.nan]))}


def _negotiation_summary(bounded: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The common QoS levels RTStream's negotiation chose: their mean and lowest, the
    rounds negotiated below full QoS and those predicted late even at the least."""
    levels = [d["level"] for d in bounded if d.get("level") is not None]
    if not levels:
        return None
    return {"rounds": len(levels), "mean_level": float(np.mean(levels)),
            "lowest_level": float(min(levels)),
            "lowered_rounds": sum(level < 1.0 for level in levels),
            "predicted_late": sum(bool(d.get("unreachable")) for d in bounded
                                  if d.get("level") is not None),
            "late": sum(d["missed"] for d in bounded if d.get("level") is not None)}


def _shared_summary(bounded: list[dict[str, Any]]) -> dict[str, Any] | None:
    """What Babcock's shedders on shared segments did: the rounds they shed, the query's
    rates P, its largest error bound ε, and the rounds predicted over even so."""
    shared = [d for d in bounded if d.get("shared")]
    if not shared:
        return None
    rates = [d["shared"]["effective"] for d in shared]
    bounds = [d["shared"]["epsilon"] for d in shared if d["shared"]["effective"] < 1.0]
    return {"rounds": len(shared), "shed_rounds": sum(p < 1.0 for p in rates),
            "mean_rate": float(np.mean(rates)), "lowest_rate": float(min(rates)),
            "on_shared_segment": sum(d["shared"]["segment_rate"] < 1.0 for d in shared),
            "highest_epsilon": (None if None in bounds else max(bounds, default=0.0)),
            "delta": shared[-1]["shared"]["delta"],
            "predicted_over": sum(not d["shared"]["met"] for d in shared),
            "late": sum(d["missed"] for d in shared)}


def _memory_summary(records: list[dict[str, Any]]) -> dict[str, Any]:
    """What the memory budget did: the rounds whose windows shrank, how far, and the
    queries' memory before and after (PIPES' windows)."""
    held = [r["window"] for r in records if r.get("window")]
    fractions = [w["fraction"] for w in held]
    return {"budget": held[-1]["budget"], "rounds": len(held),
            "over_budget": sum(w["memory_before"] > w["budget"] for w in held),
            "adapted_rounds": sum(f < 1.0 for f in fractions),
            "over_budget_after": sum(not w["met"] for w in held),
            "lowest_fraction": float(min(fractions)), "mean_fraction": float(np.mean(fractions)),
            "peak_memory_before": float(max(w["memory_before"] for w in held)),
            "peak_memory_after": float(max(w["memory_after"] for w in held))}


def _measured_summary(shadowed: list[dict[str, Any]], model_rounds: pd.DataFrame,
                      tolerance: Tolerance) -> dict[str, Any]:
    """Measured fidelity and regret of the shadowed rounds (every candidate timed), the
    model's fidelity on the same rounds, and the total seconds of each way to choose."""
    plans = list(shadowed[0]["shadow_seconds"])
    times = np.array([[r["shadow_seconds"][p] for p in plans] for r in shadowed])
    chosen = np.array([plans.index(r["plan"]) for r in shadowed])
    rows = np.arange(len(shadowed))
    fastest = times.min(axis=1)
    hits = [measured_hit(list(t), c, tolerance) for t, c in zip(times, chosen)]
    per_plan = times.sum(axis=0)
    model_hit = dict(zip(model_rounds["round"], model_rounds["hit"]))
    model_hits = np.array([model_hit.get(r["round"], np.nan) for r in shadowed], dtype=float)
    return {
        "rounds": len(shadowed),
        "fidelity": float(np.mean(hits)),
        "regret": float(np.mean(times[rows, chosen] / fastest - 1)),
        "seconds_lost": float(np.sum(times[rows, chosen] - fastest)),
        "model_fidelity_same_rounds": (float(np.nanmean(model_hits))
                                       if np.isfinite(model_hits).any() else math.nan),
        "fastest": [plans[i] for i in times.argmin(axis=1)],
        "total_seconds": {
            "adaptive": float(times[rows, chosen].sum()),
            "oracle": float(fastest.sum()),
            "best_static": float(per_plan.min()), "best_static_plan": plans[per_plan.argmin()],
            "worst_static": float(per_plan.max()),
            "worst_static_plan": plans[per_plan.argmax()],
            "per_plan": dict(zip(plans, map(float, per_plan)))},
    }


def report_markdown(summary: dict[str, Any]) -> str:
    """The run report as Markdown."""
    s = summary
    estimator = s.get("policy", {}).get("estimator", "?")
    lines = [f"# cqopt run report: {s['query']}", "",
             *[f"- **{a['severity']}**: {a['message']}" for a in s.get("shed_alarms", [])],
             *s.get("verdict", {}).get("lines", []),
             f"- rounds run: {s['rounds']} ({s['empty_rounds']} without tuples); stopped by "
             f"{s.get('stopped_by', '?')}; rounds pending (incomplete): "
             f"{len(s.get('pending_rounds', []))}; late tuples: {s.get('late_tuples', 0)}; "
             f"tuples without a time: {s.get('untimed_tuples', 0)}; tuples read from files "
             f"that grew after Spark read them: {s.get('recovered_tuples', 0)}; files that "
             f"changed after they were read, their other tuples not run: "
             f"{len(s.get('changed_files', []))}",
             *[f"- **the chart does not cover the data**: {a['message']}"
               for a in s.get("alarms", [])],
             "- policy: " + ", ".join(f"{k} {v}" for k, v in s.get("policy", {}).items()),
             "- plans run: " + ", ".join(f"{p} x{n}" for p, n in s["plans_run"].items()),
             f"- lag behind the newest complete round: last {s['lag_s']['last']:.1f} s, "
             f"highest {s['lag_s']['highest']:.1f} s; rounds where it had grown "
             f"{LAG_ROUNDS} rounds in a row: {s['lag_warnings']}",
             f"- moves: {s['moves']}, switches: {s['switches']}; off-chart rounds (the chart "
             f"did not cover their statistics, so every plan was costed at them): "
             f"{s.get('off_chart_rounds', 0)}",
             f"- chosen plans' wall time (result written to Parquet): "
             f"{s['plan_seconds_total']:.3f} s; rows out: {s['rows_out_total']}",
             f"- measuring each round's statistics (the estimator {estimator}): "
             f"{s['statistics_seconds_total']:.3f} s in all, "
             f"{_share(s['statistics_seconds_total'], s['plan_seconds_total'])} of the "
             "chosen plans' time"]
    timeline = s.get("timeline", "")
    if timeline == "timeline.png":
        lines += ["", "![Which plan ran when, its seconds against the other plans' and the "
                  "prediction, and the lag](timeline.png)", ""]
    elif timeline:
        lines.append(f"- {timeline}")
    if "deadline" in s:
        d = s["deadline"]
        lines.append(f"- deadline {d['seconds']:g} s per round: {d['missed']} of {d['rounds']} "
                     f"rounds took longer (measured); {d['shed_rounds']} rounds shed "
                     f"{d['tuples_dropped']:,.0f} of {d['tuples']:,} tuples at their inputs "
                     f"(COUNT and SUM answers scaled by 1/kept); "
                     f"{d['unreachable_rounds']} rounds could not fit even at the least "
                     f"share kept; {d.get('shed_on_driver', 0)} rounds shed on the driver, "
                     "before Spark read them")
        n = d.get("negotiation")
        if n:
            lines.append(f"- negotiated QoS level (RTStream, one per micro-batch for every "
                         f"query's rounds): mean {n['mean_level']:.3f}, lowest "
                         f"{n['lowest_level']:.3f}; {n['lowered_rounds']} of {n['rounds']} "
                         f"rounds below full QoS; {n['late']} rounds late (measured), "
                         f"{n['predicted_late']} predicted late even at the least share")
        b = d.get("shared_shedding")
        if b:
            bound = ("none (a shed round with no tuple kept)" if b["highest_epsilon"] is None
                     else f"{b['highest_epsilon']:.3f}")
            lines.append(f"- shedders on shared segments (Babcock et al.): {b['shed_rounds']} of "
                         f"{b['rounds']} rounds shed, {b['on_shared_segment']} of them sampled "
                         f"on a segment shared with other queries; the query's rate P: mean "
                         f"{b['mean_rate']:.3f}, lowest {b['lowest_rate']:.3f}; highest error "
                         f"bound ε {bound} at confidence {1 - b['delta']:g}; "
                         f"{b['predicted_over']} rounds predicted over the deadline even so, "
                         f"{b['late']} late (measured)")
    if "memory" in s:
        m = s["memory"]
        lines.append(f"- memory budget {m['budget']:,.0f} B (the queries' chosen plans, "
                     f"chart model): {m['over_budget']} of {m['rounds']} rounds over it at "
                     f"full windows; windows shrunk (PIPES) in {m['adapted_rounds']} rounds, "
                     f"to {m['lowest_fraction']:.2f} of their range at the lowest (mean "
                     f"{m['mean_fraction']:.2f}); peak memory {m['peak_memory_before']:,.0f} B "
                     f"before, {m['peak_memory_after']:,.0f} B after; "
                     f"{m['over_budget_after']} rounds still over it")
    if "model" in s:
        lines.append(f"- model fidelity (the chart's model at the observed statistics): "
                     f"{s['model']['fidelity']:.3f}, regret {s['model']['regret']:.3f}")
    m = s.get("measured")
    if m:
        t = m["total_seconds"]
        lines += [f"- measured fidelity (chosen plan measured fastest within {s['tolerance']}): "
                  f"{m['fidelity']:.3f} over {m['rounds']} shadowed rounds; model fidelity on "
                  f"the same rounds {m['model_fidelity_same_rounds']:.3f}",
                  f"- measured regret (mean time over the fastest): {m['regret']:.3f}; "
                  f"{m['seconds_lost']:.3f} s lost",
                  "", "| total time (noop sink) | seconds |", "|---|---|",
                  f"| adaptive chart | {t['adaptive']:.3f} |",
                  f"| fastest per round (oracle) | {t['oracle']:.3f} |",
                  f"| best static plan ({t['best_static_plan']}) | {t['best_static']:.3f} |",
                  f"| worst static plan ({t['worst_static_plan']}) | {t['worst_static']:.3f} |"]
    return "\n".join(lines) + "\n"


def _share(part: float, whole: float) -> str:
    return f"{part / whole:.1%}" if whole > 0 and math.isfinite(part) else "an unknown share"


def workload_markdown(results: Mapping[str, RunResult], failures: Mapping[str, int],
                      shared: Mapping[str, int] | None = None) -> str:
    """The workload's report: a line per query, what their plans shared, then each
    query's report as a section."""
    lines = ["# cqopt workload run report", "",
             "| query | rounds | switches | rows out | plan seconds | failed micro-batches |",
             "|---|---|---|---|---|---|"]
    for name, result in results.items():
        s = result.summary
        lines.append(f"| {name} | {s['rounds']} | {s['switches']} | {s['rows_out_total']} | "
                     f"{s['plan_seconds_total']:.3f} | {failures.get(name, 0)} |")
    lines += ["", shared_line(shared)]
    for name, result in results.items():
        section = report_markdown(result.summary).replace(
            f"# cqopt run report: {name}", f"## {name}", 1)
        lines += ["", section.rstrip("\n"),
                  f"- its folder: {name}/ (results, round log, report.md)"]
    return "\n".join(lines) + "\n"


def _many(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def shared_line(shared: Mapping[str, int] | None) -> str:
    """What the queries' plans shared, in one sentence.

    >>> print(shared_line({"jobs": 10, "jobs_sharing": 4, "shared_steps": 4, "saved": 5}))
    Shared work: in 4 of 10 micro-batches, 4 steps (the same step over the same tuples in several chosen plans) were computed once instead of 9 times: 5 computations saved.
    >>> print(shared_line({"jobs": 2, "jobs_sharing": 2, "shared_steps": 0, "saved": 0,
    ...                    "shared_results": 3, "joint_jobs": 2, "reads": 12, "tables": 5}))
    Shared work: 2 of 2 micro-batches ran every query's plans as one Spark job, handed 5 tables of tuples for 12 reads (a stream's equal tuples once); 3 plans took their whole result from an equal query's plan over the same tuples (computed once, its rows copied).
    """
    if not shared or not shared.get("jobs"):
        return "Shared work: none (shadow timing or a deadline runs each query alone)."
    jobs, joint = shared["jobs"], shared.get("joint_jobs", 0)
    results, count = shared.get("shared_results", 0), shared["shared_steps"]
    said = []
    if joint:
        said.append(f"{joint} of {jobs} micro-batches ran every query's plans as one Spark "
                    f"job, handed {_many(shared['tables'], 'table')} of tuples for "
                    f"{shared['reads']} reads (a stream's equal tuples once)")
    if count:
        said.append(f"in {shared['jobs_sharing']} of {jobs} micro-batches, "
                    f"{_many(count, 'step')} (the same step over the same tuples in several "
                    f"chosen plans) {'was' if count == 1 else 'were'} computed once instead "
                    f"of {count + shared['saved']} times: "
                    f"{_many(shared['saved'], 'computation')} saved")
    if results:
        said.append(f"{_many(results, 'plan')} took {'its' if results == 1 else 'their'} "
                    "whole result from an equal query's plan over the same tuples (computed "
                    "once, its rows copied)")
    if not said:
        return (f"Shared work: none; in {jobs} micro-batches no two chosen plans had a step "
                "alike over the same tuples.")
    return f"Shared work: {'; '.join(said)}."
