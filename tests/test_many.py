"""Plans for many queries in one call (cqopt.charts.many) against the scalar choose."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from cqopt.charts.build import build_local
from cqopt.charts.lookup import load
from cqopt.charts.many import Decider, decide
from cqopt.charts.spec import workload_specs
from cqopt.charts.store import write_chart_set
from cqopt.charts.workload import workload_from_dict
from cqopt.errors import CqoptError

JOIN3 = ("SELECT * FROM TCP, UDP, SF WHERE TCP.src_host = UDP.dest_host "
         "AND UDP.dest_host = SF.dest_host WINDOW [1]")
QUERIES = [
    {"name": "Q1", "sql": "SELECT TCP.src_host FROM TCP WHERE TCP.dest_host = 2 WINDOW [1]"},
    {"name": "Q1b", "sql": "SELECT TCP.src_host FROM TCP WHERE TCP.dest_host = 7 WINDOW [2]",
     "k": 3, "ranges": {"rate.TCP": [200, 700]}},
    {"name": "U", "sql": "SELECT UDP.src_host FROM UDP WHERE UDP.src_host > 9 WINDOW [1]",
     "k": 5},
    {"name": "Q2", "sql": JOIN3, "fixed": {"jsel.TCP.UDP": 0.001, "jsel.SF.UDP": 0.001,
                                           "jsel.SF.TCP": 0.001}},
    {"name": "J", "sql": "SELECT * FROM TCP, UDP WHERE TCP.src_host = UDP.dest_host WINDOW [1]",
     "ranges": {"jsel.TCP.UDP": [0.0, 0.01]}},
    {"name": "S", "sql": "SELECT SF.src_host FROM SF WINDOW [1]", "k": 6},  # rate.SF alone
]


@pytest.fixture(scope="module")
def chart_set(dec_catalog, tmp_path_factory):
    specs = [s for s, _ in workload_specs(workload_from_dict(
        {"defaults": {"k": 4}, "query": QUERIES}), dec_catalog)]
    built = build_local(specs, dec_catalog, progress=False)
    refined = build_local([specs[0]], dec_catalog, progress=False, refine=12)
    for chart in refined:  # a refined chart is looked up through its finest grid
        chart.spec = replace(chart.spec, name="Q1-R")
    out = tmp_path_factory.mktemp("many") / "charts"
    write_chart_set(out, built + refined, dec_catalog)
    return load(out)


def _round(decider, rng, spill):
    """Random statistics over every chart's ranges, ``spill`` beyond them on each side."""
    lo = {s: min(c.spec.axes[i].lo for c in decider.charts.values()
                 for i, a in enumerate(c.spec.axes) if a.statistic == s)
          for s in decider.statistics}
    hi = {s: max(a.hi for c in decider.charts.values() for a in c.spec.axes if a.statistic == s)
          for s in decider.statistics}
    out = {}
    for s in decider.statistics:
        width = hi[s] - lo[s]
        x = rng.uniform(max(lo[s] - spill * width, 0.0), hi[s] + spill * width)
        out[s] = min(x, 1.0) if s.startswith(("sel", "jsel")) else x
    return out


def _scalar(chart_set, query, stats):
    return chart_set.choose(query, {a.statistic: stats[a.statistic]
                                    for a in chart_set[query].spec.axes})


def test_every_query_gets_the_scalar_choice_clamps_included(chart_set):
    decider = Decider(chart_set)
    assert len({len(c.spec.axes) for c in chart_set.values()}) == 3  # three groups
    rng = np.random.default_rng(28)
    seen_clamped = 0
    for n in range(300):
        stats = _round(decider, rng, spill=0.3 if n % 2 else 0.0)
        if n % 7 == 0:  # the ends of the axes, where a region's edge is its last region's
            stats = {s: (1000.0 if s.startswith("rate") else float(n % 2)) for s in stats}
        got = decider.choose(stats)
        assert set(got) == set(chart_set)
        for query in chart_set:
            want = _scalar(chart_set, query, stats)
            assert got[query] == want, (query, stats)
            assert got.plan(query) is want.plan
            assert got.clamped.get(query, ()) == want.clamped
            seen_clamped += bool(want.clamped)
        counts = {}
        for clamps in got.clamped.values():
            for s in clamps:
                counts[s] = counts.get(s, 0) + 1
        assert got.clamped_counts == counts
    assert seen_clamped > 100  # the clamped path was exercised, not only the inside


def test_one_chart_under_many_names_and_own_statistics(chart_set):
    names = {f"{q}#{i}": chart_set[q] for i in range(50) for q in ("Q1", "Q2", "J")}
    decider = Decider(names)
    stats = {"rate.TCP": 450.0, "rate.UDP": 300.0, "rate.SF": 120.0, "sel.TCP": 0.3,
             "jsel.TCP.UDP": 0.002}
    own = {f"Q1#{i}": {"sel.TCP": i / 49} for i in range(50)}
    got = decider.choose(stats, own)
    assert len(got.plans) == 150 and got.ignored == ()
    for name, chart in names.items():
        axes = {a.statistic: own.get(name, stats).get(a.statistic, stats[a.statistic])
                for a in chart.spec.axes}
        assert got[name] == chart.choose(axes)
    assert len({got[f"Q1#{i}"].cell for i in range(50)}) == 4  # own values reached the cells
    assert decide(names, stats, own).plans == got.plans


def test_fixed_statistics_given_are_named_as_ignored(chart_set):
    stats = {"rate.TCP": 450.0, "rate.UDP": 300.0, "rate.SF": 120.0, "sel.TCP": 0.3,
             "jsel.TCP.UDP": 0.002, "jsel.SF.UDP": 0.01}
    got = Decider(chart_set, ["Q1", "Q2"]).choose(stats)
    assert got.ignored == ("jsel.TCP.UDP", "jsel.SF.UDP")
    assert "ignored jsel.TCP.UDP, jsel.SF.UDP" in repr(got)


def _error(call):
    with pytest.raises(CqoptError) as info:
        call()
    message = str(info.value)
    assert "\n" not in message
    return type(info.value), message


@pytest.mark.parametrize("change, query", [
    ({"rate.TPC": 5.0}, "Q1"),  # an unknown name, closest to Q1's statistic
    ({"rate.TCP": float("nan")}, "Q1"),
    ({"rate.UDP": -3.0}, "U"),
    ({"sel.TCP": 1.5}, "Q1"),
    ({"rate.SF": "fast"}, "Q2"),
    ({"rate.TCP": 10**400}, "Q1"),
])
def test_bad_statistics_give_the_scalar_error(chart_set, change, query):
    decider = Decider(chart_set)
    stats = {"rate.TCP": 450.0, "rate.UDP": 300.0, "rate.SF": 120.0, "sel.TCP": 0.3,
             "sel.UDP": 0.4, "jsel.TCP.UDP": 0.002, **change}
    mine = {s: stats[s] for s in stats
            if s in change or s in [a.statistic for a in chart_set[query].spec.axes]}
    assert _error(lambda: decider.choose(stats)) == _error(lambda: chart_set.choose(query, mine))


def test_a_missing_statistic_gives_the_scalar_error(chart_set):
    decider = Decider(chart_set)
    stats = {"rate.TCP": 450.0, "rate.SF": 120.0, "sel.TCP": 0.3, "sel.UDP": 0.4,
             "jsel.TCP.UDP": 0.002}
    first = next(q for q, c in chart_set.items()
                 if "rate.UDP" in [a.statistic for a in c.spec.axes])
    mine = {a.statistic: stats[a.statistic] for a in chart_set[first].spec.axes
            if a.statistic in stats}
    assert _error(lambda: decider.choose(stats)) == _error(lambda: chart_set.choose(first, mine))
    # given for the one query that needs it, as its own: nothing is missing
    only_u = Decider(chart_set, ["U"])
    assert only_u.choose({"sel.UDP": 0.4}, {"U": {"rate.UDP": 300.0}})["U"] == \
        chart_set.choose("U", {"sel.UDP": 0.4, "rate.UDP": 300.0})


def test_bad_own_statistics_give_the_scalar_error(chart_set):
    decider = Decider(chart_set, ["Q1", "U"])
    stats = {"rate.TCP": 450.0, "rate.UDP": 300.0, "sel.TCP": 0.3, "sel.UDP": 0.4}
    assert _error(lambda: decider.choose(stats, {"Q1": {"sel.UDP": 0.2}})) == \
        _error(lambda: chart_set.choose("Q1", {"rate.TCP": 450.0, "sel.TCP": 0.3,
                                               "sel.UDP": 0.2}))
    assert _error(lambda: decider.choose(stats, {"U": {"sel.UDP": -1.0}}))[1] == \
        _error(lambda: chart_set.choose("U", {"rate.UDP": 300.0, "sel.UDP": -1.0}))[1]
    _, message = _error(lambda: decider.choose(stats, {"Q2": {"rate.SF": 1.0}}))
    assert "query 'Q2', which is not decided here" in message


def test_unknown_query_names_are_one_line(chart_set):
    _, message = _error(lambda: Decider(chart_set, ["Q1", "Q3"]))
    assert "no chart for query 'Q3'" in message
    got = Decider(chart_set, ["Q1"]).choose({"rate.TCP": 450.0, "sel.TCP": 0.3})
    _, message = _error(lambda: got["Q11"])
    assert "no decision for query 'Q11'; did you mean 'Q1'?" in message
