"""Fidelity reports: report.md and report.html with PNG figures, and the JSON table.

Per query: the plan diagram with the path of the estimated statistics drawn
over it; fidelity per 100 s of trace time for the chart and every baseline
(like Figure 3a of the OM paper); fidelity and regret against k; and a table
of fidelity, regret, moves and switches for the chart and every baseline.
Each query's headline is the chart's regret next to BEST-STATIC's (the
headroom), then fidelity; where the headroom is below 0.1% the report says
that no chart can help that query on that trace.

>>> headline({"regret": 0.01, "fidelity": 0.8, "headroom": 0.02, "no_headroom": False,
...           "baselines": {"best_static": {"plan": "P"}}})
'regret 0.0100 against BEST-STATIC (P) 0.0200; fidelity 0.800'
"""

from __future__ import annotations

import html
import json
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


def table_rows(replay: Replay) -> list[dict[str, Any]]:
    s = replay.summary
    rows = [{"method": LABELS["chart"], "fidelity": s["fidelity"], "regret": s["regret"],
             "moves": s["moves"], "switches": s["switches"]}]
    for name in BASELINES:
        b = s["baselines"][name]
        rows.append({"method": LABELS[name], "fidelity": b["fidelity"], "regret": b["regret"],
                     "moves": b.get("moves", ""), "switches": b.get("switches", "")})
    return rows


def headline(summary: dict[str, Any]) -> str:
    """The chart's regret next to BEST-STATIC's, then fidelity, and the headroom's verdict."""
    text = (f"regret {summary['regret']:.4f} against BEST-STATIC "
            f"({summary['baselines']['best_static']['plan']}) {summary['headroom']:.4f}; "
            f"fidelity {summary['fidelity']:.3f}")
    if summary["no_headroom"]:
        text += (". The headroom is below 0.1%: no chart can help this query on this trace "
                 "(one fixed plan is as good as switching)")
    return text


def _fmt(value) -> str:
    if isinstance(value, float):
        return f"{value:.3f}"
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
        axes = [a.statistic for a in chart.spec.axes]
        path = list(zip(*(replay.rounds[f"estimate:{a}"] for a in axes[:2])))
        if len(axes) == 1:
            path = [(x[0], 0.5) for x in path]
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
               "| method | fidelity | regret | moves | switches |", "|---|---|---|---|---|"]
        md += [f"| {r['method']} | {_fmt(r['fidelity'])} | {_fmt(r['regret'])} | "
               f"{r['moves']} | {r['switches']} |" for r in rows]
        body += [f"<h2>{html.escape(name)}</h2>", f"<p><b>{html.escape(headline(s))}.</b></p>",
                 f"<p>{s['rounds']} rounds; misses: {s['misses']['estimation']} from "
                 f"estimation, {s['misses']['discretization']} from discretization. RATE ran "
                 f"{html.escape(s['baselines']['rate']['plan'])}.</p>",
                 "<table border='1' cellpadding='4'><tr><th>method</th><th>fidelity</th>"
                 "<th>regret</th><th>moves</th><th>switches</th></tr>"]
        body += [f"<tr><td>{html.escape(r['method'])}</td><td>{_fmt(r['fidelity'])}</td>"
                 f"<td>{_fmt(r['regret'])}</td><td>{r['moves']}</td><td>{r['switches']}</td></tr>"
                 for r in rows]
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
