"""Fidelity reports: report.md and report.html with PNG figures, and the JSON table.

Per query: the plan diagram with the path of the estimated statistics drawn
over it; fidelity per 100 s of trace time for the chart and every baseline
(like Figure 3a of the OM paper); fidelity and regret against k; and a table
of fidelity, regret, moves and switches for the chart and every baseline.
Each query's headline is a verdict: how much less (or more) the chart's
plans cost in total than the best fixed plan in hindsight, then its regret
next to BEST-STATIC's (the headroom) and fidelity; where the headroom is
below 0.1% the report says that no chart can help that query on that trace.

>>> headline({"regret": 0.01, "fidelity": 0.8, "near_fidelity": 0.9, "headroom": 0.02,
...           "no_headroom": False, "undefined_rounds": 0,
...           "baselines": {"best_static": {"plan": "P"}}})
'the chart costs 1.0% less than the best fixed plan P (regret 0.0100 against BEST-STATIC 0.0200); fidelity 0.800, within 1% of the optimum 0.900'
"""

from __future__ import annotations

import html
import json
import math
from pathlib import Path
from typing import Any

import pandas as pd
from matplotlib.figure import Figure

from cqopt.charts.diagram import plan_diagram
from cqopt.replay.replay import BASELINES, Replay, fidelity_over_time

LABELS = {"chart": "chart (estimated)", "oracle_chart": "ORACLE-CHART", "rand": "RAND",
          "rate": "RATE", "best_static": "BEST-STATIC"}


def summary_json(replays: dict[str, Replay]) -> dict[str, Any]:
    """``queries → name → {rounds, fidelity, regret, moves, switches, baselines}``."""
    return {"queries": {name: r.summary for name, r in replays.items()}}


COLUMNS = ("method", "regret", "mean_regret", "fidelity", "near_fidelity", "moves", "switches")
HEADERS = ("method", "regret", "mean regret", "fidelity", "within 1%", "moves", "switches")


def table_rows(replay: Replay) -> list[dict[str, Any]]:
    s = replay.summary
    rows = [{"method": LABELS["chart"], **{c: s[c] for c in COLUMNS[1:]}}]
    for name in BASELINES:
        b = s["baselines"][name]
        rows.append({"method": LABELS[name], **{c: b.get(c, "") for c in COLUMNS[1:]}})
    return rows


def verdict(summary: dict[str, Any]) -> str:
    """How the chart's total cost compares with the best fixed plan's, in one clause."""
    plan = summary["baselines"]["best_static"]["plan"]
    chart, static = 1.0 + summary["regret"], 1.0 + summary["headroom"]
    if not (math.isfinite(chart) and math.isfinite(static)):
        return f"the chart's total cost against the best fixed plan {plan} is not finite"
    change = chart / static - 1.0
    if abs(change) < 0.0005:
        return f"the chart costs the same as the best fixed plan {plan}"
    return (f"the chart costs {abs(change):.1%} {'less' if change < 0 else 'more'} than the "
            f"best fixed plan {plan}")


def headline(summary: dict[str, Any]) -> str:
    """The verdict, the chart's regret next to BEST-STATIC's, fidelity, and the headroom's verdict."""
    text = (f"{verdict(summary)} (regret {summary['regret']:.4f} against BEST-STATIC "
            f"{summary['headroom']:.4f}); fidelity {summary['fidelity']:.3f}, within 1% of the "
            f"optimum {summary['near_fidelity']:.3f}")
    if summary["no_headroom"]:
        text += (". The headroom is below 0.1%: no chart can help this query on this trace "
                 "(one fixed plan is as good as switching)")
    if summary["undefined_rounds"]:
        text += (f". {summary['undefined_rounds']} rounds in which every plan costs infinitely "
                 "much are left out of every score")
    return text


def _fmt(value) -> str:
    if isinstance(value, float):
        return f"{value:.4f}"
    return str(value)


def figure_over_time(replay: Replay, out: Path) -> Path:
    over = fidelity_over_time(replay.rounds)
    fig = Figure(figsize=(7.5, 3.9), layout="constrained")
    ax = fig.subplots()
    for col in ("chart", "oracle_chart", "best_static", "rate", "rand"):
        ax.plot(over["from"], over[col] * 100, marker="o", ms=3, label=LABELS[col])
    ax.set_xlabel("trace time (s), per 100 s")
    ax.set_ylabel("fidelity (%)")
    ax.set_ylim(-2, 102)
    fig.legend(fontsize=8, ncols=4, loc="outside lower center")
    ax.set_title(f"{replay.name}: fidelity over time")
    fig.savefig(out, dpi=110)
    return out


def figure_k_sweep(name: str, sweep: pd.DataFrame, out: Path) -> Path:
    fig = Figure(figsize=(7.5, 3.4), layout="constrained")
    left, right = fig.subplots(1, 2)
    left.plot(sweep["k"], sweep["fidelity"] * 100, marker="o", label="chart (estimated)")
    left.plot(sweep["k"], sweep["oracle_fidelity"] * 100, marker="s", ls="--",
              label="ORACLE-CHART")
    left.set_xlabel("k (regions per axis)")
    left.set_ylabel("fidelity (%)")
    left.legend(fontsize=8)
    right.plot(sweep["k"], sweep["regret"], marker="o", color="tab:red")
    right.set_xlabel("k (regions per axis)")
    right.set_ylabel("mean regret")
    fig.suptitle(f"{name}: fidelity and regret against k")
    fig.savefig(out, dpi=110)
    return out


def write_report(out: Path, replays: dict[str, Replay], charts: dict, sweeps: dict[str,
                 pd.DataFrame], meta: dict[str, Any]) -> Path:
    """Write report.md, report.html, summary.json and figures/ under ``out``."""
    out = Path(out)
    figures = out / "figures"
    figures.mkdir(parents=True, exist_ok=True)
    md = ["# cqopt fidelity report", ""]
    md += [f"- {k}: {v}" for k, v in meta.items()]
    body = ["<h1>cqopt fidelity report</h1>", "<ul>"]
    body += [f"<li>{html.escape(str(k))}: {html.escape(str(v))}</li>" for k, v in meta.items()]
    body.append("</ul>")
    for name, replay in replays.items():
        chart = charts[name]
        path = {a.statistic: replay.rounds[f"estimate:{a.statistic}"].to_numpy()
                for a in chart.spec.axes}
        diagram = plan_diagram(chart, figures / f"{name}-diagram.png", overlay=path,
                               title=f"{name}: plan diagram with the estimated statistics")
        over = figure_over_time(replay, figures / f"{name}-over-time.png")
        images = [diagram, over]
        if name in sweeps and len(sweeps[name]):
            images.append(figure_k_sweep(name, sweeps[name], figures / f"{name}-k-sweep.png"))
        s = replay.summary
        rows = table_rows(replay)
        md += ["", f"## {name}", "", f"**{headline(s)}.**", "", f"{s['rounds']} rounds; misses: "
               f"{s['misses']['estimation']} from estimation, "
               f"{s['misses']['discretization']} from discretization "
               f"(the oracle chart missed too). RATE ran {s['baselines']['rate']['plan']}.", "",
               "| " + " | ".join(HEADERS) + " |", "|" + "---|" * len(HEADERS)]
        md += ["| " + " | ".join(_fmt(r[c]) for c in COLUMNS) + " |" for r in rows]
        body += [f"<h2>{html.escape(name)}</h2>", f"<p><b>{html.escape(headline(s))}.</b></p>",
                 f"<p>{s['rounds']} rounds; misses: {s['misses']['estimation']} from "
                 f"estimation, {s['misses']['discretization']} from discretization. RATE ran "
                 f"{html.escape(s['baselines']['rate']['plan'])}.</p>",
                 "<table border='1' cellpadding='4'><tr>"
                 + "".join(f"<th>{h}</th>" for h in HEADERS) + "</tr>"]
        body += ["<tr>" + "".join(f"<td>{html.escape(_fmt(r[c]))}</td>" for c in COLUMNS)
                 + "</tr>" for r in rows]
        body.append("</table>")
        if name in sweeps and len(sweeps[name]):
            sweep = sweeps[name]
            md += ["", "| k | cells | plans used | fidelity | oracle fidelity | regret | moves "
                   "| switches |", "|---|---|---|---|---|---|---|---|"]
            md += [f"| {r.k} | {r.cells} | {r.plans_used} | {r.fidelity:.3f} | "
                   f"{r.oracle_fidelity:.3f} | {r.regret:.3f} | {r.moves} | {r.switches} |"
                   for r in sweep.itertuples()]
            body.append(sweep.to_html(index=False, float_format=lambda x: f"{x:.3f}"))
        for image in images:
            rel = image.relative_to(out).as_posix()
            md += ["", f"![{image.stem}]({rel})"]
            body.append(f"<p><img src='{html.escape(rel)}' alt='{html.escape(image.stem)}'></p>")
    (out / "report.md").write_text("\n".join(md) + "\n", encoding="utf-8")
    page = ("<!doctype html><html><head><meta charset='utf-8'><title>cqopt fidelity report"
            "</title></head><body>" + "\n".join(body) + "</body></html>\n")
    (out / "report.html").write_text(page, encoding="utf-8")
    (out / "summary.json").write_text(json.dumps(summary_json(replays), indent=2),
                                      encoding="utf-8")
    return out
