"""The fidelity report: verdicts first, a glossary, tables alike in Markdown and HTML,
figures that scale, and the templates shipped in the wheel; checked without a browser."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import zipfile
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from cqopt.catalog import load_catalog
from cqopt.charts.spec import workload_specs
from cqopt.charts.workload import load_workload
from cqopt.replay.overload import deadline_replay, memory_replay, negotiated_replay
from cqopt.replay.replay import fidelity_over_time, k_sweep, local_chart, replay
from cqopt.replay.report import (
    COLUMNS,
    DEADLINE_HEADERS,
    HEADERS,
    MEMORY_HEADERS,
    NEGOTIATION_HEADERS,
    glossary_terms,
    over_time_bucket,
    verdict_sentence,
    write_report,
)

POLICY = {"estimator": "decay (d = 5, decay = 0.5)", "choice": "point", "fallback": "none",
          "hysteresis": "none"}


@pytest.fixture(scope="module")
def report(examples, tmp_path_factory):
    """A report of Q1 and Q2 (k = 5) on 150 synthetic rounds, with a k sweep of Q2."""
    catalog = load_catalog(examples / "dec-pkt.toml")
    workload = load_workload(examples / "workload.toml")
    specs = dict((s.name, s) for s, _ in workload_specs(workload, catalog, {"k": 5}))
    rng = np.random.default_rng(7)
    n = 150
    t = np.arange(n)
    observed = pd.DataFrame({
        "round": t, "start": t * 1.0,
        "rate.TCP": 550 + 400 * np.sin(t / 20) + rng.normal(0, 30, n),
        "rate.UDP": 300 + 150 * np.cos(t / 25) + rng.normal(0, 20, n),
        "rate.SF": 250 + 200 * np.sin(t / 40) + rng.normal(0, 20, n),
        "sel.TCP": np.clip(0.3 + 0.25 * np.sin(t / 15) + rng.normal(0, 0.03, n), 0, 1)})
    charts = {name: local_chart(spec, catalog) for name, spec in specs.items()}
    replays = {name: replay(name, chart, catalog, observed) for name, chart in charts.items()}
    # Q1 under a deadline its busiest rounds overrun (the engine model's default constants)
    shed = deadline_replay(replays["Q1"], charts["Q1"], catalog, observed, deadline=0.3006)
    replays["Q1"].summary["deadline"] = shed.summary
    # and both under a memory budget their busiest rounds exceed (PIPES' windows)
    held = memory_replay(replays, charts, catalog, {n: observed for n in replays}, budget=3e4)
    assert held.summary["over_budget_full"] > 0 == held.summary["over_budget_after"]
    for r in replays.values():
        r.summary["memory"] = held.summary
    # and sharing each round's engine time: a deadline half the rounds overrun at full QoS
    roomy = negotiated_replay(replays, charts, catalog, {n: observed for n in replays}, 1e9)
    deadline = float(np.median(roomy.rounds["seconds_full"]))
    shared = negotiated_replay(replays, charts, catalog, {n: observed for n in replays},
                               deadline, {"Q1": ((0.0, 1.0), (0.5, 0.8), (1.0, 0.0))})
    assert shared.summary["miss_share_without"] == pytest.approx(0.5, abs=0.01)
    assert shared.summary["miss_share_with"] < 0.5 and shared.summary["negotiated_rounds"] > 0
    assert 0 < shared.summary["average_quality"] < 1
    for r in replays.values():
        r.summary["negotiation"] = shared.summary
    sweeps = {"Q2": k_sweep("Q2", specs["Q2"], catalog, observed, [2, 5])}
    out = tmp_path_factory.mktemp("report")
    write_report(out, replays, charts, sweeps,
                 {"catalog": "dec-pkt.toml", "trace": "synthetic", **POLICY})
    return out, replays


class _Page(HTMLParser):
    """The tables (rows of cell texts), image sources, tags with a width attribute,
    glossary terms and the order of the first verdict, table and heading of the page."""

    def __init__(self):
        super().__init__()
        self.tables, self.images, self.widths, self.terms, self.order = [], [], [], [], []
        self.style, self._text, self._in = "", None, []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self._in.append(tag)
        if "width" in attrs or "width" in attrs.get("style", ""):
            self.widths.append(tag)
        if tag == "img":
            self.images.append(attrs["src"])
        elif tag == "table":
            self.tables.append([])
        elif tag == "tr":
            self.tables[-1].append([])
        elif tag in ("td", "th", "dt"):
            self._text = ""
        if tag in ("table", "h2") or (tag == "ul" and attrs.get("class") == "verdicts"):
            self.order.append(tag if tag != "ul" else "verdicts")

    def handle_endtag(self, tag):
        self._in.pop()
        if tag in ("td", "th"):
            self.tables[-1][-1].append(self._text.strip())
        elif tag == "dt":
            self.terms += [t.strip() for t in self._text.split(",")]
        if tag in ("td", "th", "dt"):
            self._text = None

    def handle_data(self, data):
        if self._text is not None:
            self._text += data
        if self._in and self._in[-1] == "style":
            self.style += data


def _page(out: Path) -> _Page:
    page = _Page()
    page.feed((out / "report.html").read_text(encoding="utf-8"))
    return page


def _markdown_tables(text: str) -> list[list[list[str]]]:
    tables, current = [], None
    for line in text.splitlines():
        if line.startswith("|"):
            cells = [re.sub(r"^\[(.*)\]\(#[\w-]+\)$", r"\1", c.strip().replace("\\|", "|"))
                     for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]  # a link's text
            if all(set(c) <= {"-", ":"} for c in cells):
                continue  # the header's rule
            if current is None:
                current = []
                tables.append(current)
            current.append(cells)
        else:
            current = None
    return tables


def test_markdown_and_html_tables_have_the_same_rows_and_columns(report):
    out, _ = report
    html_tables = _page(out).tables
    md_tables = _markdown_tables((out / "report.md").read_text(encoding="utf-8"))
    # Q1: baselines, deadline, memory and negotiation (the workload's, once), plans;
    # Q2: baselines, k sweep, plans
    assert len(html_tables) == len(md_tables) == 8
    assert html_tables == md_tables
    assert html_tables[0][0] == list(HEADERS) and len(html_tables[0]) == 6
    assert html_tables[1][0] == list(DEADLINE_HEADERS)
    assert [row[0] for row in html_tables[1][1:]] == ["without shedding", "with shedding"]
    assert html_tables[2][0] == list(MEMORY_HEADERS)
    assert [row[0] for row in html_tables[2][1:]] == ["full windows", "adapted windows"]
    assert html_tables[3][0] == list(NEGOTIATION_HEADERS)
    assert [row[0] for row in html_tables[3][1:]] == ["full QoS", "negotiated QoS"]
    assert html_tables[6][0][:3] == ["k", "cells", "plans used"]


def test_every_term_of_the_tables_is_in_the_glossary(report):
    out, _ = report
    page = _page(out)
    assert set(page.terms) == glossary_terms()
    for table in page.tables:
        headers, rows = table[0], table[1:]
        terms = set(headers) | {row[0] for row in rows}
        # first cells that are values, not terms: k, and the plans' numbers P1..Pn
        terms = {t for t in terms if not re.fullmatch(r"\d+|P\d+", t)}
        assert terms <= glossary_terms(), terms - glossary_terms()
    for term in ("headroom", "estimation miss", "discretization miss", "undefined rounds",
                 "near fidelity", "moves", "switches", "RAND", "RATE", "BEST-STATIC",
                 "ORACLE-CHART"):
        assert term in page.terms


def test_figures_exist_and_nothing_is_wider_than_the_page(report):
    """report.html is one file, its figures inlined; report.md links the same figures."""
    import base64

    out, _ = report
    page = _page(out)
    assert len(page.images) == 5  # Q1: diagram, over time; Q2: diagram, over time, k sweep
    md = (out / "report.md").read_text(encoding="utf-8")
    linked = re.findall(r"!\[[^]]*\]\((figures/[^)]+)\)", md)
    assert len(linked) == 5
    for src, path in zip(page.images, linked):
        assert src.startswith("data:image/png;base64,"), src[:40]
        assert base64.b64decode(src.split(",", 1)[1]) == (out / path).read_bytes(), path
    assert page.widths == []  # no width attribute or inline style anywhere
    assert re.search(r"img\s*\{[^}]*max-width:\s*100%", page.style)
    # Every width the stylesheet sets is a maximum, or no more than 800 px.
    for prop, value, unit in re.findall(r"([\w-]*width)\s*:\s*([\d.]+)(px|rem|em)?",
                                        page.style):
        px = float(value) * (16 if unit in ("rem", "em") else 1)
        assert prop.startswith(("max-", "border")) or px <= 800, (prop, value, unit)


def test_the_first_screen_is_a_verdict_per_query_with_its_settings(report):
    out, replays = report
    page = _page(out)
    assert page.order[0] == "verdicts" and page.order[1] == "h2"  # before any table
    html = (out / "report.html").read_text(encoding="utf-8")
    verdicts = html[html.index('<ul class="verdicts">'):html.index("</ul>")]
    assert verdicts.count("<li") == len(replays) == 2
    for name, r in replays.items():
        assert f"<b>{name}</b>" in verdicts
        assert r.summary["baselines"]["best_static"]["plan"] in verdicts
    assert "OM model, weights (0.4, 0.6), k = 5" in verdicts
    assert "jsel.SF.TCP = 0.001" in verdicts  # Q2's fixed statistics
    assert "estimator decay (d = 5, decay = 0.5)" in html
    md = (out / "report.md").read_text(encoding="utf-8")
    assert md.index("- **Q1**:") < md.index("## Q1") and md.index("- **Q2**:") < md.index("|")


def test_every_verdict_names_its_unit_in_markdown_html_and_json(report):
    """The OM charts' verdicts are in the OM model's utility, never checked against Spark."""
    out, replays = report
    unit, note = "the OM model's utility", "not checked against Spark"
    md = (out / "report.md").read_text(encoding="utf-8")
    for name, r in replays.items():
        line = next(x for x in md.splitlines() if x.startswith(f"- **{name}**:"))
        assert f", in {unit}" in line
        assert r.summary["unit"] == unit and not r.summary["unit_checked"]
    # The unit's note follows each verdict, the command to run as code.
    assert md.count(f"  **Unit:** {unit} at the paper's operator rates; {note}: run "
                    "`cqopt run --shadow` to measure.") == len(replays)
    html = (out / "report.html").read_text(encoding="utf-8")
    verdicts = html[html.index('<ul class="verdicts">'):html.index("</ul>")]
    assert verdicts.count(", in the OM model&#39;s utility") == len(replays)  # the verdicts
    assert verdicts.count("<b>Unit:</b> the OM model&#39;s utility at") == len(replays)
    assert verdicts.count('<span class="unit unchecked">') == len(replays)
    assert verdicts.count("run <code>cqopt run --shadow</code> to measure") == len(replays)
    assert "`" not in verdicts
    assert f"The chart against every baseline, in {unit}" in md
    saved = json.loads((out / "summary.json").read_text(encoding="utf-8"))["queries"]
    for name, r in replays.items():
        assert saved[name]["unit"] == saved[name]["verdict"]["unit"] == unit
        assert note in saved[name]["unit_note"]
        assert saved[name]["verdict"]["text"] in md  # the same words on the page


def _summary(regret: float, headroom: float, **extra) -> dict:
    return {"regret": regret, "headroom": headroom, "no_headroom": headroom < 0.001,
            "switches": 12, "misses": {"estimation": 30, "discretization": 4},
            "baselines": {"best_static": {"plan": "TCP⋈UDP⋈SF"}},
            "unit": "the OM model's utility", "unit_checked": False,
            "unit_note": "the OM model's utility at the paper's operator rates", **extra}


def test_a_losing_chart_is_said_so_with_what_to_try():
    lost = verdict_sentence(_summary(0.30, 0.0), POLICY)
    assert lost["outcome"] == "no headroom" and "run TCP⋈UDP⋈SF" in lost["text"]
    lost = verdict_sentence(_summary(0.30, 0.0047 + 0.0), POLICY)
    assert lost["outcome"] == "loses"
    assert lost["text"] == ("the chart does not pay: it is dearer than the best fixed plan "
                            "TCP⋈UDP⋈SF by 29.4%, in the OM model's utility")
    assert lost["try"] == ["--hysteresis priced", "--fallback 20"]
    priced = verdict_sentence(_summary(0.30, 0.0047), {**POLICY, "hysteresis": "priced (...)"})
    assert "--hysteresis priced" not in priced["try"] and priced["try"]
    won = verdict_sentence(_summary(0.01, 0.30), POLICY)
    assert won["outcome"] == "wins" and won["try"] == []
    assert won["text"].endswith("cheaper than the best fixed plan TCP⋈UDP⋈SF by 22.3%, in "
                                "the OM model's utility")


def test_over_time_has_a_point_per_fraction_of_the_trace():
    rounds = pd.DataFrame({"start": np.arange(600.0), **{c: np.ones(600) for c in (
        "hit", "oracle_hit", "rand_hit", "rate_hit", "best_static_hit")}})
    assert len(fidelity_over_time(rounds, over_time_bucket(rounds))) >= 20
    assert len(fidelity_over_time(rounds)) == 6  # the old fixed 100 s


def test_report_columns_follow_the_headers():
    assert len(COLUMNS) == len(HEADERS) and COLUMNS[0] == HEADERS[0] == "method"


@pytest.mark.slow
def test_the_wheel_ships_the_report_templates(tmp_path, repo_root):
    """A non-editable install carries the templates the report renders from."""
    wheels = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(wheels),
                    str(repo_root)], check=True, capture_output=True)
    (wheel,) = wheels.glob("cqopt-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    templates = {p.name for p in (repo_root / "replay" / "templates").glob("*.j2")}
    assert templates == {"report.j2", "markdown.j2", "html.j2"}
    assert {f"cqopt/replay/templates/{t}" for t in templates} <= names
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target",
                    str(target), str(wheel)], check=True, capture_output=True)
    # The installed copy (first on the path) renders a page from its own templates.
    code = ("import cqopt.replay.report as r; "
            "print(r.__file__); print(r.render({'title': 'T', 'policy': [], 'inputs': [], "
            "'queries': [], 'glossary': []}, 'html'))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, env={**os.environ, "PYTHONPATH": str(target)})
    where, page = done.stdout.split("\n", 1)
    assert Path(where).is_relative_to(target)
    assert "<title>T</title>" in page and "max-width: 100%" in page


def test_a_statistic_the_chart_does_not_cover_is_a_warning_on_the_first_screen(report, examples,
                                                                                  tmp_path):
    from dataclasses import replace as copy

    _, replays = report
    message = ('rate.TCP left the chart in 23% of 150 rounds (observed 80 to 2400; the chart '
               'covers 100 to 1000): rebuild with ranges = { "rate.TCP" = [80, 2400] }')
    alarmed = {name: copy(r, summary={**r.summary, "alarms": [{"message": message}]}
                          if name == "Q2" else r.summary) for name, r in replays.items()}
    catalog = load_catalog(examples / "dec-pkt.toml")
    workload = load_workload(examples / "workload.toml")
    specs = dict((s.name, s) for s, _ in workload_specs(workload, catalog, {"k": 5}))
    charts = {name: local_chart(spec, catalog) for name, spec in specs.items()}
    write_report(tmp_path, alarmed, charts, {}, {"trace": "synthetic", **POLICY})
    md = (tmp_path / "report.md").read_text()
    first_screen = md.split("\n## ")[0]
    assert "**Warning:** " + message in first_screen and first_screen.count("Warning") == 1
    assert "rebuild with ranges" in (tmp_path / "report.html").read_text().split("<h2")[0]


def test_the_full_qos_row_counts_a_late_round_as_quality_zero(report):
    """Half the rounds overrun the shared deadline at full QoS: their late query scores 0."""
    out, replays = report
    shared = replays["Q1"].summary["negotiation"]
    assert shared["miss_share_without"] == pytest.approx(0.5, abs=0.01)
    assert 0.5 <= shared["full_quality"] < 1
    (table,) = [t for t in _markdown_tables((out / "report.md").read_text(encoding="utf-8"))
                if t[0] == list(NEGOTIATION_HEADERS)]
    assert table[1][:3] == ["full QoS", "50.0%", f"{shared['full_quality']:.2f}"]


def test_answers_all_shed_are_an_alarm_on_the_first_screen(report, examples, tmp_path):
    """A deadline shorter than the engine model's fixed cost of a plan: every tuple is shed,
    which the negotiated and the per-query deadline say first, as an ALARM."""
    _, replays = report
    catalog = load_catalog(examples / "dec-pkt.toml")
    workload = load_workload(examples / "workload.toml")
    specs = dict((s.name, s) for s, _ in workload_specs(workload, catalog, {"k": 5}))
    charts = {name: local_chart(spec, catalog) for name, spec in specs.items()}
    rounds = len(replays["Q1"].rounds)
    observed = pd.DataFrame({"round": np.arange(rounds), "start": np.arange(rounds) * 1.0,
                             "rate.TCP": 500.0, "rate.UDP": 300.0, "rate.SF": 200.0,
                             "sel.TCP": 0.3})
    shared = negotiated_replay(replays, charts, catalog, {n: observed for n in replays}, 0.01)
    assert shared.summary["lowest_level"] == 0 and shared.summary["all_shed_rounds"] == rounds
    assert shared.summary["full_quality"] == 0.0  # every query late at full input
    shed = deadline_replay(replays["Q1"], charts["Q1"], catalog, observed, deadline=0.01)
    assert shed.summary["all_shed_rounds"] == rounds
    (alarm,) = shed.summary["alarms"]
    assert alarm["severity"] == "ALARM" and alarm["message"].startswith("Q1 answered nothing")
    summaries = {n: {**r.summary, "negotiation": shared.summary, "alarms": []}
                 for n, r in replays.items()}
    summaries["Q1"]["deadline"] = shed.summary
    from dataclasses import replace as copy

    write_report(tmp_path, {n: copy(r, summary=summaries[n]) for n, r in replays.items()},
                 charts, {}, {"trace": "synthetic", **POLICY})
    md = (tmp_path / "report.md").read_text(encoding="utf-8")
    first_screen = md.split("\n## ")[0]
    assert first_screen.index("**ALARM:** Q1, Q2 answered nothing: every tuple was shed in "
                              f"all {rounds} rounds to fit 0.01 s a round") < first_screen.index(
        "- **Q1**")
    assert "  **ALARM:** Q1 answered nothing" in first_screen
    html = (tmp_path / "report.html").read_text(encoding="utf-8").split("<h2")[0]
    assert html.count('class="alarm severe"><b>ALARM:</b>') == 2


def test_terms_link_to_the_glossary_where_they_first_appear(report):
    """The first screen links cost, regret, fidelity...; a table header links its term the
    first time the page shows it; every link lands on an entry, and cost is defined."""
    out, _ = report
    html = (out / "report.html").read_text(encoding="utf-8")
    md = (out / "report.md").read_text(encoding="utf-8")
    ids = set(re.findall(r'<dt id="([\w-]+)">', html))
    links = re.findall(r'<a href="#(g-[\w-]+)">', html)
    assert links and set(links) <= ids
    assert len(links) == len(set(links))  # each term linked once: where it first appears
    assert html.index('href="#g-cost"') < html.index("<table")  # on the first screen
    assert html.index('href="#g-mean-regret"') < html.index("<table", html.index("<table") + 1)
    assert re.search(r'<dt id="g-cost">cost</dt><dd>[^<]*utility[^<]*seconds', html)
    md_links = re.findall(r"\]\(#(g-[\w-]+)\)", md)
    assert md_links == links  # the same links in the same order
    assert set(md_links) <= set(re.findall(r'<a id="(g-[\w-]+)"></a>', md))


def test_a_two_column_diagram_keeps_its_text_readable_at_800_px(examples, tmp_path,
                                                                 monkeypatch):
    """Q2's diagram (four slices in two columns, about 1040 px) is shown at most 776 px
    wide in an 800 px window: its tick labels must still be 11 px or more there."""
    from matplotlib.figure import Figure
    from PIL import Image

    from cqopt.charts.diagram import plan_diagram

    catalog = load_catalog(examples / "dec-pkt.toml")
    (spec,) = [s for s, _ in workload_specs(load_workload(examples / "workload.toml"), catalog,
                                            {"k": 5}) if s.name == "Q2"]
    drawn, save = [], Figure.savefig
    monkeypatch.setattr(Figure, "savefig", lambda fig, *a, **k: (drawn.append(fig),
                                                                 save(fig, *a, **k))[1])
    path = plan_diagram(local_chart(spec, catalog), tmp_path / "q2.png")
    (fig,) = drawn
    width = Image.open(path).size[0]
    shown = min(1.0, 776 / width)  # the report's column at 800 px, less its padding
    axes = [ax for ax in fig.axes if ax.get_visible()]
    assert len(axes) == 4 and width > 776
    for ax in axes:
        for label in ax.get_xticklabels() + ax.get_yticklabels():
            assert label.get_fontsize() * fig.dpi / 72 * shown >= 11, label.get_fontsize()
        assert ax.xaxis.label.get_fontsize() * fig.dpi / 72 * shown >= 11
