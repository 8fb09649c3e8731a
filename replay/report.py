"""Fidelity reports: report.md and report.html from one summary, and summary.json.

:func:`report_summary` gathers everything the report says into one plain
object; one Jinja2 template (``templates/report.j2``) lays it out, and a
format's small macro file (``templates/markdown.j2`` or ``templates/html.j2``)
spells headings, tables and figures in that format, so the Markdown and the
HTML cannot drift: same sections, same tables, same rows and columns.

The first screen is a verdict per query in one sentence (:func:`verdict_sentence`:
does the chart cost less than the best fixed plan in hindsight, in which unit,
and if not, what to try) with the settings that produced it. Per query follow the
details, the table of the chart against every baseline, the k sweep, the
plan diagram with the path of the estimates, fidelity over time, the plans
P1…Pn; at the end the inputs and a glossary of every term the page uses
(:data:`cqopt.replay.glossary.GLOSSARY`), each term linked to it where it first
appears. ``report.html`` is one file: its figures are inlined (``data:`` URIs);
``report.md`` links ``figures/``.

Every verdict names the unit its totals are in (:mod:`cqopt.replay.verdict`,
which words the run report's verdicts too), and says so where the chart's
model was never checked against the engine:

>>> s = {"regret": 0.01, "fidelity": 0.8, "near_fidelity": 0.9, "headroom": 0.02,
...      "no_headroom": False, "undefined_rounds": 0, "unit": "the OM model's utility",
...      "unit_checked": False, "unit_note": "the OM model's utility at the paper's rates",
...      "baselines": {"best_static": {"plan": "P"}}}
>>> headline(s)
"the chart pays: it is cheaper than the best fixed plan P by 1.0%, in the OM model's utility (regret 0.0100 against BEST-STATIC 0.0200); fidelity 0.800, within 1% of the optimum 0.900. Unit: the OM model's utility at the paper's rates"
"""

from __future__ import annotations

import base64
import json
import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from cqopt.charts.diagram import fixed_text, plan_numbers, plan_diagram
from cqopt.replay.glossary import anchor, glossary_entries, glossary_terms, link_first
from cqopt.replay.replay import BASELINES, Replay, fidelity_over_time, off_chart_line
from cqopt.replay.verdict import replay_verdict

TEMPLATES = Path(__file__).parent / "templates"
LABELS = {"chart": "chart (estimated)", "oracle_chart": "ORACLE-CHART", "rand": "RAND",
          "rate": "RATE", "best_static": "BEST-STATIC"}
OVER_TIME_POINTS = 24  # buckets of the fidelity-over-time figure, whatever the trace's length


DEADLINE_HEADERS = ("run", "rounds missing the deadline", "rounds shed", "tuples shed",
                    "largest promised error")


def deadline_table(d: dict[str, Any]) -> dict[str, Any]:
    """The deadline's table: the run without shedding beside the run with it."""
    share = d["tuples_dropped"] / d["tuples"] if d["tuples"] else 0.0
    epsilon = (f"{d['max_epsilon']:.3g} (delta {d['delta']:g})"
               if math.isfinite(d["max_epsilon"]) else NOT_APPLICABLE)
    constants = ("its default constants, not fitted to this engine"
                 if d["engine_constants"] == "defaults" else "constants fitted to this engine")
    return {"caption": f"A deadline of {d['deadline_s']:g} s per round (the engine model, "
                       f"{constants})",
            "headers": DEADLINE_HEADERS,
            "rows": [["without shedding", f"{d['miss_share_without']:.1%}", "0.0%", "0",
                      NOT_APPLICABLE],
                     ["with shedding", f"{d['miss_share_with']:.1%}", f"{d['shed_share']:.1%}",
                      f"{d['tuples_dropped']:,.0f} ({share:.1%})", epsilon]]}


MEMORY_HEADERS = ("windows", "rounds over the budget", "peak memory", "window fraction")


def memory_table(m: dict[str, Any]) -> dict[str, Any]:
    """The memory budget's table: the workload at full windows beside PIPES' windows."""
    return {"caption": f"A memory budget of {m['budget']:,.0f} B shared by "
                       f"{', '.join(m['queries'])} (PIPES' resource manager, windows down to "
                       f"{m['window_min']:.0%} of their own)",
            "headers": MEMORY_HEADERS,
            "rows": [["full windows", str(m["over_budget_full"]),
                      f"{m['peak_memory_full']:,.0f} B", "1.00"],
                     ["adapted windows", str(m["over_budget_after"]),
                      f"{m['peak_memory_after']:,.0f} B",
                      f"{m['lowest_window_fraction']:.2f} lowest, in {m['adapted_rounds']} "
                      "rounds"]]}


NEGOTIATION_HEADERS = ("QoS", "rounds missing the deadline", "average quality",
                       "lowest level")


def negotiation_table(n: dict[str, Any]) -> dict[str, Any]:
    """The shared deadline's table: every query at full QoS beside the negotiated level."""
    return {"caption": f"{', '.join(n['queries'])} sharing each round's {n['deadline_s']:g} s "
                       "(RTStream's inter-query negotiation)",
            "headers": NEGOTIATION_HEADERS,
            # At full QoS every query keeps its whole input, but a late one counts quality 0.
            "rows": [["full QoS", f"{n['miss_share_without']:.1%}",
                      f"{n['full_quality']:.2f}", "1.00"],
                     ["negotiated QoS", f"{n['miss_share_with']:.1%}",
                      f"{n['average_quality']:.2f}",
                      f"{n['lowest_level']:.2f} (in {n['negotiated_rounds']} rounds below 1)"]]}


def negotiation_line(n: dict[str, Any]) -> str:
    """The shared deadline's outcome in one line, for the console.

    >>> negotiation_line({"deadline_s": 1.0, "queries": ["Q1", "Q2"], "miss_share_without": 0.5,
    ...                   "full_quality": 0.75, "miss_share_with": 0.0, "average_quality": 0.9,
    ...                   "negotiated_rounds": 5, "lowest_level": 0.7})
    'Q1, Q2 sharing 1 s a round: 50.0% of rounds late at full QoS (average quality 0.75), 0.0% at the negotiated level (average quality 0.90, lowest level 0.70, 5 rounds below full)'
    """
    return (f"{', '.join(n['queries'])} sharing {n['deadline_s']:g} s a round: "
            f"{n['miss_share_without']:.1%} of rounds late at full QoS (average quality "
            f"{n['full_quality']:.2f}), "
            f"{n['miss_share_with']:.1%} at the negotiated level (average quality "
            f"{n['average_quality']:.2f}, lowest level {n['lowest_level']:.2f}, "
            f"{n['negotiated_rounds']} rounds below full)")


def memory_line(m: dict[str, Any]) -> str:
    """The memory budget's outcome in one line, for the console.

    >>> memory_line({"budget": 1000.0, "queries": ["Q1", "Q2"], "rounds": 10,
    ...              "over_budget_full": 3, "over_budget_after": 0, "adapted_rounds": 3,
    ...              "lowest_window_fraction": 0.8, "window_min": 0.25})
    'memory budget 1,000 B (Q1, Q2): 3 of 10 rounds over it at full windows, 0 after PIPES shrank the windows in 3 rounds (to 0.80 of their range at the lowest)'
    """
    return (f"memory budget {m['budget']:,.0f} B ({', '.join(m['queries'])}): "
            f"{m['over_budget_full']} of {m['rounds']} rounds over it at full windows, "
            f"{m['over_budget_after']} after PIPES shrank the windows in {m['adapted_rounds']} "
            f"rounds (to {m['lowest_window_fraction']:.2f} of their range at the lowest)")


def deadline_line(d: dict[str, Any]) -> str:
    """The deadline's outcome in one line, for the console.

    >>> deadline_line({"deadline_s": 1.0, "miss_share_without": 0.4, "miss_share_with": 0.0,
    ...                "shed_share": 0.4, "tuples_dropped": 50.0, "tuples": 1000.0,
    ...                "max_epsilon": float("nan"), "unreachable_rounds": 0,
    ...                "engine_constants": "fitted"})
    'deadline 1 s: 40.0% of rounds miss it without shedding, 0.0% with (40.0% of rounds shed 5.0% of the tuples)'
    """
    share = d["tuples_dropped"] / d["tuples"] if d["tuples"] else 0.0
    text = (f"deadline {d['deadline_s']:g} s: {d['miss_share_without']:.1%} of rounds miss it "
            f"without shedding, {d['miss_share_with']:.1%} with ({d['shed_share']:.1%} of rounds "
            f"shed {share:.1%} of the tuples)")
    if math.isfinite(d["max_epsilon"]):
        text += f"; a COUNT's error promised within {d['max_epsilon']:.3g}"
    if "mean_quality" in d:
        text += (f"; quality by the query's input/quality table: mean {d['mean_quality']:.2f}, "
                 f"least {d['least_quality']:.2f}")
    if d.get("error_bound") is not None:
        text += (f"; {d['rounds_over_error_bound']} rounds promise more than the query's "
                 f"error bound {d['error_bound']:g}")
    if d["engine_constants"] == "defaults":
        text += ("; the engine model's constants are its defaults, not fitted to this engine "
                 "(cqopt calibrate --from-run RUN fits them)")
    return text


def query_alarms(summary: dict[str, Any]) -> list[dict[str, str]]:
    """A query's own alarms, the gravest first: ``{label, message}``.

    Rounds shed whole under its deadline (:func:`cqopt.replay.overload.shed_alarm`: all
    of them an ALARM), and statistics the chart does not cover (warnings).

    >>> query_alarms({"alarms": [{"message": "rate.S left the chart"}],
    ...               "deadline": {"alarms": [{"severity": "ALARM", "message": "no answer"}]}})
    [{'label': 'ALARM', 'message': 'no answer'}, {'label': 'Warning', 'message': 'rate.S left the chart'}]
    """
    return _labelled([*summary.get("alarms", ()), *summary.get("deadline", {}).get("alarms", ())])


def shared_alarms(replays: dict[str, Replay]) -> list[dict[str, str]]:
    """The alarms of what the queries share (the negotiated deadline), said once."""
    shared = next((r.summary["negotiation"] for r in replays.values()
                   if "negotiation" in r.summary), {})
    return _labelled(shared.get("alarms", ()))


def alarm_line(alarm: dict[str, str], who: str = "") -> str:
    """An alarm for the console: ``cqopt: ALARM: ...`` or ``cqopt: warning: ...``.

    >>> alarm_line({"label": "ALARM", "message": "Q1 answered nothing"})
    'cqopt: ALARM: Q1 answered nothing'
    """
    label = "ALARM" if alarm["label"] == "ALARM" else "warning"
    named = not who or alarm["message"].startswith(who + " ")
    return f"cqopt: {label}: {'' if named else who + ': '}{alarm['message']}"


def _labelled(alarms) -> list[dict[str, str]]:
    labelled = [{"label": a.get("severity", "Warning"), "message": a["message"]} for a in alarms]
    return sorted(labelled, key=lambda a: a["label"] != "ALARM")


def summary_json(replays: dict[str, Replay]) -> dict[str, Any]:
    """``queries → name → {rounds, fidelity, regret, moves, switches, baselines, unit,
    verdict}``: ``verdict`` is :func:`cqopt.replay.verdict.replay_verdict`'s, in ``unit``."""
    return {"queries": {name: {**r.summary, "verdict": replay_verdict(r.summary)}
                        for name, r in replays.items()}}


COLUMNS = ("method", "regret", "mean_regret", "fidelity", "near_fidelity", "moves", "switches")
HEADERS = ("method", "regret", "mean regret", "fidelity", "within 1%", "moves", "switches")
SWEEP_COLUMNS = ("k", "cells", "plans_used", "regret", "mean_regret", "fidelity",
                 "near_fidelity", "oracle_fidelity", "moves", "switches")
SWEEP_HEADERS = ("k", "cells", "plans used", "regret", "mean regret", "fidelity", "within 1%",
                 "oracle fidelity", "moves", "switches")
NOT_APPLICABLE = "–"
PLAN_HEADERS = ("plan", "share of area", "join order and operators")


def table_rows(replay: Replay) -> list[dict[str, Any]]:
    s = replay.summary
    rows = [{"method": LABELS["chart"], **{c: s[c] for c in COLUMNS[1:]}}]
    for name in BASELINES:
        b = s["baselines"][name]
        # RAND, RATE and BEST-STATIC have no chart regions to move between
        rows.append({"method": LABELS[name], **{c: b.get(c, NOT_APPLICABLE)
                                                 for c in COLUMNS[1:]}})
    return rows


def advice(summary: dict[str, Any], policy: dict[str, Any],
           sweep: pd.DataFrame | None = None) -> list[str]:
    """Options worth trying where the chart does not beat the best fixed plan (at most two).

    Many switches: a priced hysteresis (unless it ran). Misses mostly from
    estimation: the regret-aware fallback, or the expected choice. Misses
    mostly from the grid: a chart of the sweep's k of lowest regret, if lower.

    >>> s = {"switches": 9, "misses": {"estimation": 5, "discretization": 1}, "regret": 0.1}
    >>> advice(s, {"hysteresis": "none", "fallback": "none", "choice": "point"})
    ['--hysteresis priced', '--fallback 20']
    """
    tips = []
    if summary["switches"] and not str(policy.get("hysteresis", "none")).startswith("priced"):
        tips.append("--hysteresis priced")
    misses = summary["misses"]
    if misses["estimation"] >= misses["discretization"]:
        if str(policy.get("fallback", "none")) == "none":
            tips.append("--fallback 20")
        elif str(policy.get("choice", "point")).startswith("point"):
            tips.append("--choice expected")
    elif sweep is not None and len(sweep):
        best = sweep.loc[sweep["regret"].idxmin()]
        if best["regret"] < summary["regret"]:
            tips.append(f"cqopt build --k {int(best['k'])}")
    if not tips:
        tips.append("--choice expected" if str(policy.get("choice", "point")).startswith(
            "point") else "--fallback 20")
    return tips[:2]


def verdict_sentence(summary: dict[str, Any], policy: dict[str, Any],
                     sweep: pd.DataFrame | None = None) -> dict[str, Any]:
    """The first-screen verdict of one query: ``{outcome, text, try, note, checked}``.

    ``text`` is one sentence without its full stop, in
    :func:`cqopt.replay.verdict.judge`'s words (the run report's too), naming its
    unit; ``try`` lists options to try (shown as code after the text) where the
    chart does not win; ``note`` says how far the unit can be trusted and
    ``checked`` whether the chart's model was checked against the engine.

    >>> s = {"regret": 0.30, "headroom": 0.0047, "switches": 0,
    ...      "misses": {"estimation": 9, "discretization": 1}, "unit": "the OM model's utility",
    ...      "unit_note": "...", "unit_checked": False,
    ...      "baselines": {"best_static": {"plan": "P"}}}
    >>> v = verdict_sentence(s, {"fallback": "none"})
    >>> v["outcome"], v["try"]
    ('loses', ['--fallback 20'])
    >>> v["text"]
    "the chart does not pay: it is dearer than the best fixed plan P by 29.4%, in the OM model's utility"
    """
    judged = replay_verdict(summary)
    tips = (advice(summary, policy, sweep) if judged["outcome"] in ("loses", "even") else [])
    return {"outcome": judged["outcome"], "text": judged["text"], "try": tips,
            "note": summary["unit_note"], "checked": summary["unit_checked"]}


def headline(summary: dict[str, Any]) -> str:
    """The verdict in its unit (no headroom said there), the chart's regret next to
    BEST-STATIC's, fidelity, and the unit's note where the chart's model was never checked."""
    text = (f"{replay_verdict(summary)['text']} (regret {summary['regret']:.4f} against "
            f"BEST-STATIC {summary['headroom']:.4f}); fidelity {summary['fidelity']:.3f}, "
            f"within 1% of the optimum {summary['near_fidelity']:.3f}")
    if summary["undefined_rounds"]:
        text += (f". {summary['undefined_rounds']} rounds in which every plan costs infinitely "
                 "much are left out of every score")
    if not summary["unit_checked"]:
        text += f". Unit: {summary['unit_note']}"
    return text


def _fmt(value, digits: int = 4) -> str:
    if isinstance(value, (float, np.floating)):
        return f"{value:.{digits}f}"
    return str(value)


# Drawn widest first, each with its own marker and dashes, so that coinciding lines
# (BEST-STATIC and RATE often run the same plan) both stay visible.
OVER_TIME_STYLES = {
    "best_static": dict(color="tab:green", lw=4.5, alpha=0.45, ls="-", marker="s", ms=7),
    "oracle_chart": dict(color="tab:orange", lw=2.5, ls="-", marker="D", ms=5),
    "rate": dict(color="tab:red", lw=1.5, ls="--", marker="v", ms=5),
    "chart": dict(color="tab:blue", lw=1.5, ls="-", marker="o", ms=3.5),
    "rand": dict(color="tab:purple", lw=1.0, ls=":", marker="x", ms=5),
}


COINCIDE_OFFSET = 1.5  # percentage points between lines of equal values


def over_time_bucket(rounds: pd.DataFrame, points: int = OVER_TIME_POINTS) -> float:
    """Seconds per point of the over-time figure: the trace's span over ``points``, but
    never less than one round, so a 600-s trace of 1-s rounds gets 24 points, not 6.

    >>> over_time_bucket(pd.DataFrame({"start": np.arange(600.0)}))
    25.0
    >>> over_time_bucket(pd.DataFrame({"start": np.arange(119.0)}))  # 5 rounds a point
    5.0
    >>> over_time_bucket(pd.DataFrame({"start": np.arange(5.0)}))
    1.0
    """
    start = rounds["start"].to_numpy(dtype=float)
    if len(start) < 2:
        return 1.0
    step = float(np.median(np.diff(start))) or 1.0
    span = float(start.max() - start.min()) + step
    return step * max(1, round(span / points / step))  # whole rounds per point


def figure_over_time(replay: Replay, out: Path) -> Path:
    bucket = over_time_bucket(replay.rounds)
    over = fidelity_over_time(replay.rounds, bucket)
    fig = Figure(figsize=(7.5, 3.9), layout="constrained")
    ax = fig.subplots()
    drawn: dict[str, np.ndarray] = {}
    for col, style in OVER_TIME_STYLES.items():
        values = over[col].to_numpy() * 100
        same = [LABELS[c] for c, v in drawn.items() if np.allclose(v, values, equal_nan=True)]
        label = LABELS[col] + (f" (= {', '.join(same)})" if same else "")
        drawn[col] = values
        # A line equal to one drawn before it is nudged down, so that both show.
        ax.plot(over["from"], values - COINCIDE_OFFSET * len(same), label=label, **style)
    ax.set_xlabel(f"trace time (s), per {bucket:.3g} s")
    ax.set_ylabel("fidelity (%)")
    ax.set_ylim(-3 - COINCIDE_OFFSET * (len(OVER_TIME_STYLES) - 1), 103)
    fig.legend(fontsize=8, ncols=3, loc="outside lower center")
    ax.set_title(f"{replay.name}: fidelity over time")
    fig.savefig(out, dpi=100)
    return out


def figure_k_sweep(name: str, sweep: pd.DataFrame, out: Path) -> Path:
    fig = Figure(figsize=(7.5, 3.4), layout="constrained")
    left, right = fig.subplots(1, 2)
    left.plot(sweep["k"], sweep["fidelity"] * 100, marker="o", lw=1.5, label=LABELS["chart"])
    left.plot(sweep["k"], sweep["oracle_fidelity"] * 100, marker="s", ls="--", lw=2.5,
              alpha=0.7, label=LABELS["oracle_chart"])
    left.set_xlabel("k (regions per axis)")
    left.set_ylabel("fidelity (%)")
    left.legend(fontsize=8)
    right.plot(sweep["k"], sweep["regret"], marker="o", color="tab:red")
    right.set_xlabel("k (regions per axis)")
    right.set_ylabel("regret")
    fig.suptitle(f"{name}: fidelity and regret against k")
    fig.savefig(out, dpi=100)
    return out


def _settings(chart) -> str:
    spec = chart.spec
    weights = ", ".join(f"{w:g}" for w in spec.weights)
    ks = sorted({a.k for a in spec.axes})
    text = (f"{spec.model.upper()} model, weights ({weights}), k = "
            f"{'/'.join(str(k) for k in ks)}")
    return text + (f", fixed {fixed_text(spec)}" if spec.fixed else "")


POLICY_KEYS = ("estimator", "choice", "off-chart", "fallback", "hysteresis")
# The terms the first screen names, linked to the glossary under the verdicts.
FIRST_TERMS = ("cost", "unit", "regret", "fidelity", "headroom", "BEST-STATIC")


def data_uri(path: Path) -> str:
    """An image file as a ``data:`` URI, so ``report.html`` holds its figures itself."""
    kind = {".png": "image/png", ".svg": "image/svg+xml"}.get(path.suffix.lower(),
                                                               "application/octet-stream")
    return f"data:{kind};base64," + base64.b64encode(path.read_bytes()).decode("ascii")


def report_summary(out: Path, replays: dict[str, Replay], charts: dict,
                   sweeps: dict[str, pd.DataFrame], meta: dict[str, Any]) -> dict[str, Any]:
    """Draw the figures under ``out/figures`` and gather what the report says, per query.

    Parameters
    ----------
    out : Path
        The report's directory; figures go to ``out/figures``.
    replays, charts, sweeps : dict
        Per query name: its :class:`Replay`, its chart, its k sweep (may be missing).
    meta : dict
        The inputs and the policy (``estimator``, ``choice``, ``fallback``,
        ``hysteresis`` as :func:`cqopt.cli.policy_options.describe_policy` words them).

    Returns
    -------
    dict
        ``title``, ``policy``, ``inputs``, ``queries`` (one dict per query:
        ``verdict``, ``settings``, ``details``, ``tables``, ``figures``) and
        ``glossary``: plain strings and lists, ready for the template.
    """
    figures = out / "figures"
    figures.mkdir(parents=True, exist_ok=True)
    policy = {k: meta[k] for k in POLICY_KEYS if k in meta}
    queries, linked = [], {anchor(t) for t in FIRST_TERMS}  # the first screen links these
    for name, replay in replays.items():
        chart, s, sweep = charts[name], replay.summary, sweeps.get(name)
        if sweep is not None and not len(sweep):
            sweep = None
        estimates = {a.statistic: replay.rounds[f"estimate:{a.statistic}"].to_numpy()
                     for a in chart.spec.axes}
        images = [(plan_diagram(chart, figures / f"{name}-diagram.png", overlay=estimates,
                                title=f"{name}: plan diagram with the path of the estimates"),
                   "The plan diagram; the black path is the estimated statistics, round by "
                   "round")]
        images.append((figure_over_time(replay, figures / f"{name}-over-time.png"),
                       "Fidelity over time, the chart against every baseline (a line equal to "
                       "another is marked = in the legend and drawn 1.5 points lower)"))
        tables = [{"caption": f"The chart against every baseline, in {s['unit']}",
                   "headers": HEADERS,
                   "rows": [[_fmt(r[c]) for c in COLUMNS] for r in table_rows(replay)]}]
        if sweep is not None:
            images.append((figure_k_sweep(name, sweep, figures / f"{name}-k-sweep.png"),
                           "Fidelity and regret against k"))
            tables.append({"caption": "Charts of other k, replayed on the same rounds",
                           "headers": SWEEP_HEADERS,
                           "rows": [[_fmt(row[c], 3) if c not in ("k", "cells", "plans_used",
                                                                  "moves", "switches")
                                     else str(int(row[c])) for c in SWEEP_COLUMNS]
                                    for _, row in sweep.iterrows()]})
        if "deadline" in s:
            tables.append(deadline_table(s["deadline"]))
        if "memory" in s and name == s["memory"]["queries"][0]:  # the workload's, once
            tables.append(memory_table(s["memory"]))
        if "negotiation" in s and name == s["negotiation"]["queries"][0]:
            tables.append(negotiation_table(s["negotiation"]))
        tables.append({"caption": "The plans of the diagram", "headers": PLAN_HEADERS,
                       "rows": [[f"P{n}", f"{share:.1%}", chart.plans[i].id]
                                for n, (i, share) in enumerate(plan_numbers(chart), 1)]})
        details = (f"Over {s['rounds']} rounds, in {s['unit']}, the chart's regret is "
                   f"{s['regret']:.4f} against BEST-STATIC's {s['headroom']:.4f} (the "
                   f"headroom); fidelity "
                   f"{s['fidelity']:.3f}, within 1% {s['near_fidelity']:.3f}. Misses: "
                   f"{s['misses']['estimation']} estimation, {s['misses']['discretization']} "
                   f"discretization. RATE ran {s['baselines']['rate']['plan']}.")
        if s["undefined_rounds"]:
            details += (f" {s['undefined_rounds']} undefined rounds are left out of every "
                        "score.")
        if s.get("fallbacks"):
            details += f" The fallback ran the best fixed plan in {s['fallbacks']} rounds."
        if s.get("off_chart_rounds"):
            details += " " + off_chart_line(s)
        queries.append({
            "name": name, "verdict": verdict_sentence(s, policy, sweep),
            "settings": _settings(chart), "details": details,
            "tables": link_first(tables, linked),
            # Statistics the chart does not cover (replay/coverage.py): on the first screen.
            "alarms": query_alarms(s),
            "figures": [{"src": path.relative_to(out).as_posix(), "alt": f"{name}: {caption}",
                         "caption": caption, "inline": data_uri(path)}
                        for path, caption in images]})
    return {"title": "cqopt fidelity report", "alarms": shared_alarms(replays),
            "policy": [(k, str(v)) for k, v in policy.items()],
            "inputs": [(k, str(v)) for k, v in meta.items() if k not in policy],
            "queries": queries,
            "terms": [(term, anchor(term)) for term in FIRST_TERMS],
            "glossary": glossary_entries()}


def _numeric(text: str) -> bool:
    """A table cell that is a number, a percentage or not applicable (right-aligned in HTML)."""
    if text == NOT_APPLICABLE:
        return True
    try:
        float(str(text).removesuffix("%"))
    except ValueError:
        return False
    return True


def _code_html(text: str):
    """``text`` escaped for HTML, its `backticked` spans as code (Markdown spells them so).

    >>> str(_code_html("run `cqopt run --shadow` <now>"))
    'run <code>cqopt run --shadow</code> &lt;now&gt;'
    """
    from markupsafe import Markup, escape

    return Markup(re.sub(r"`([^`]+)`", r"<code>\1</code>", str(escape(text))))


def render(summary: dict[str, Any], fmt: str) -> str:
    """The report as ``fmt`` (``markdown`` or ``html``), from :func:`report_summary`'s object.

    Both come from one template, ``report.j2``; the format's macros (autoescaped
    for HTML) spell its headings, tables, lists and figures.
    """
    from jinja2 import Environment, FileSystemLoader, StrictUndefined

    if fmt not in ("markdown", "html"):
        raise ValueError(f"report format {fmt!r}: markdown or html")
    env = Environment(loader=FileSystemLoader(TEMPLATES), autoescape=fmt == "html",
                      trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True,
                      undefined=StrictUndefined)
    env.filters["cell"] = lambda text: str(text).replace("|", "\\|").replace("\n", " ")
    env.filters["code"] = _code_html if fmt == "html" else str
    env.tests["numeric"] = _numeric
    return env.get_template("report.j2").render(fmt=fmt, **{"alarms": [], "terms": [], **summary})


def write_report(out: Path, replays: dict[str, Replay], charts: dict, sweeps: dict[str,
                 pd.DataFrame], meta: dict[str, Any]) -> Path:
    """Write report.md, report.html, summary.json and figures/ under ``out``."""
    out = Path(out)
    summary = report_summary(out, replays, charts, sweeps, meta)
    (out / "report.md").write_text(render(summary, "markdown"), encoding="utf-8")
    (out / "report.html").write_text(render(summary, "html"), encoding="utf-8")
    (out / "summary.json").write_text(json.dumps(summary_json(replays), indent=2),
                                      encoding="utf-8")
    return out
