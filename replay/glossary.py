"""The fidelity report's glossary: every term the report uses, defined once, and links
to it from where each term first appears.

Each entry's anchor is :func:`anchor` of its first name, the same in Markdown
(an ``<a id>`` before the entry) and HTML (the ``<dt>``'s id).

>>> anchor("chart (estimated)"), anchor("BEST-STATIC")
('g-chart-estimated', 'g-best-static')
>>> tables = [{"headers": ("method", "regret")}, {"headers": ("k", "regret")}]
>>> [t["links"] for t in link_first(tables)]
[{'method': 'g-method', 'regret': 'g-regret'}, {'k': 'g-k'}]
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

# Every term the report uses, defined once; the tables' headers and method names are
# looked up here (tests check that none is missing). A term may have other names.
GLOSSARY: tuple[tuple[tuple[str, ...], str], ...] = (
    (("cost",), "what a chart minimizes in each round, and what regret and fidelity compare: "
                "the chart's cost model's utility, a weighted sum of the plan's predicted "
                "output rate, memory (and CPU time) at the round's statistics (OM's and "
                "PIPES' models: a number, not time), or the plan's predicted seconds (the "
                "engine model); cqopt run --shadow measures the seconds on Spark."),
    (("verdict",), "whether the chart's plans cost less in total than the best fixed plan "
                   "in hindsight (BEST-STATIC), in one sentence per query that names its "
                   "unit."),
    (("unit",), "what the totals a verdict compares count: the chart's model's utility "
                "(OM's and PIPES' weighted rate and memory, a number that is not time), "
                "predicted seconds (a chart of the engine model), or measured seconds on "
                "Spark (cqopt run --shadow times every plan). A model never checked against "
                "Spark says so."),
    (("method",), "how a round's plan was chosen: the chart, or one of the baselines below."),
    (("chart (estimated)",), "the chart as it runs: each round's statistics are estimated "
                             "(by default measured on a sample of the round's own tuples; "
                             "with --estimator decay, predicted from earlier rounds) and the "
                             "chart's plan at the estimate runs."),
    (("ORACLE-CHART",), "the same chart looked up at each round's actual statistics: what "
                        "the chart would do with perfect estimates."),
    (("RAND",), "a plan drawn at random every round (seeded): the floor."),
    (("RATE",), "one plan chosen once, at the mean statistics of the first rounds, and "
                "never switched: what a static optimizer does."),
    (("BEST-STATIC",), "the one fixed plan with the lowest total cost over the whole trace, "
                       "known only in hindsight: no fixed plan does better."),
    (("regret",), "the total cost of the plans a method ran over the total cost of the "
                  "per-round optimal plans, minus 1 (0 is perfect; 0.05 means 5% more "
                  "cost than always choosing right)."),
    (("mean regret",), "the mean over rounds of cost(chosen) / cost(optimal) - 1; unlike "
                       "regret, a round whose optimum costs almost nothing weighs as much as "
                       "any other."),
    (("fidelity",), "the share of rounds in which the method's plan was the optimal one "
                    "(ties count)."),
    (("within 1%", "near fidelity"), "the share of rounds in which the method's plan cost "
                                     "at most 1% more than the optimal one."),
    (("oracle fidelity",), "ORACLE-CHART's fidelity for that k."),
    (("headroom",), "BEST-STATIC's regret: the most any switching between plans can save "
                    "on this trace. Below 0.1%, no chart can help."),
    (("off-chart rounds",), "rounds whose statistics the chart does not cover (an axis "
                            "out of its range, a fixed statistic more than 2x off): every "
                            "plan was costed at them and the cheapest ran."),
    (("moves",), "rounds in which the estimate fell in another chart region than the round "
                 "before."),
    (("switches",), "rounds in which the running plan changed; a switch hands the join "
                    "state over to the new plan."),
    (("estimation miss",), "a round the chart missed although ORACLE-CHART hit: the "
                           "estimate, not the chart, was wrong."),
    (("discretization miss",), "a round both the chart and ORACLE-CHART missed: the chart's "
                               "regions are too coarse (or the model ties) there."),
    (("undefined rounds",), "rounds in which every plan costs infinitely much (an unbounded "
                            "window): no plan is right, and they are left out of every "
                            "score."),
    (("k",), "the number of regions per axis of the chart."),
    (("cells",), "the chart's regions: k to the power of its number of axes."),
    (("plans used",), "how many plans the chart holds in at least one region."),
    (("plan",), "a plan the chart holds, numbered P1…Pn by its share of the chart's area, "
                "P1 the largest (as in Picasso's plan diagrams)."),
    (("share of area",), "the fraction of the chart's regions in which the plan is the "
                         "cheapest."),
    (("join order and operators",), "the plan's id: its join order, and σ (selection) and "
                                    "π (projection) in the order they run; cqopt show "
                                    "--plans prints the whole tree."),
    (("estimator",), "how a round's statistics are estimated: sample (the default) "
                     "measures them on a simple random sample of the round's own tuples, as "
                     "RTStream does; decay, holt, median, ... predict them from the rounds "
                     "before it, as OM does."),
    (("choice",), "point: the chart's plan at the estimate (OM); expected: the plan of "
                  "lowest expected cost over recent estimation errors."),
    (("fallback",), "with --fallback N, the best fixed plan of the last N rounds runs while "
                    "it beats the chart."),
    (("hysteresis",), "how long the current plan is held before switching: none, margin "
                      "(another plan must win by a margin for some rounds), or priced "
                      "(the saving must pay for handing the join state over)."),
    (("model",), "the cost model the chart was built with (OM, PIPES or the engine's "
                 "seconds)."),
    (("deadline",), "with --deadline: the seconds each round may take; the chosen plan's "
                    "seconds are predicted by the engine model, and a round predicted to "
                    "overrun keeps only the share of its input that fits (the rest shed at "
                    "the inputs)."),
    (("run", "without shedding", "with shedding"), "without shedding, every tuple runs; "
                                                   "with shedding, each round keeps the share "
                                                   "of its input that fits the deadline."),
    (("rounds missing the deadline",), "the share of rounds whose predicted seconds exceed "
                                       "the deadline."),
    (("rounds shed",), "the share of rounds that dropped input to fit the deadline."),
    (("tuples shed",), "the tuples dropped at the inputs, and their share of all tuples."),
    (("QoS", "full QoS", "negotiated QoS"), "with --negotiate: every query at its full "
                                            "input, or at the common QoS level RTStream's "
                                            "negotiation lowered until every query finishes "
                                            "by the shared deadline."),
    (("average quality",), "RTStream's measure: the mean over queries and rounds of each "
                           "query's quality by its input/quality table (the share kept "
                           "without one), a miss counting 0."),
    (("lowest level",), "the lowest common QoS level the negotiation chose in any round "
                        "(1: full input)."),
    (("memory budget",), "with --memory-budget: the bytes every replayed query may hold "
                         "together; PIPES' resource manager shrinks every window to the same "
                         "fraction of its range in the rounds that would exceed it."),
    (("windows", "full windows", "adapted windows"), "each query's window as written, or as "
                                                     "PIPES' resource manager set it."),
    (("rounds over the budget",), "rounds whose predicted memory exceeds the budget."),
    (("peak memory",), "the most the queries hold together in any round, as the chart's "
                       "cost model predicts it."),
    (("window fraction",), "f, the common fraction of every query's window range "
                           "[least, own] (1: every window as written)."),
    (("largest promised error",), "for a COUNT: the largest relative error the shedding "
                                  "promises at confidence 1 - delta (Babcock et al.: "
                                  "epsilon = C / p); other queries get none."),
    (("weights",), "the utility weights of the cost model's terms (rate, memory[, CPU])."),
)



def glossary_terms() -> set[str]:
    """Every name :data:`GLOSSARY` defines."""
    return {name for names, _ in GLOSSARY for name in names}


def anchor(name: str) -> str:
    """The glossary entry's anchor of a term: ``g-`` and its words, lower case."""
    return "g-" + re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


_ANCHORS = {name: anchor(names[0]) for names, _ in GLOSSARY for name in names}


def glossary_entries() -> list[dict[str, Any]]:
    """The glossary as the templates list it: each entry's names, anchor and text."""
    return [{"names": names, "anchor": anchor(names[0]), "text": text}
            for names, text in GLOSSARY]


def link_first(tables: Iterable[dict[str, Any]], seen: set[str] | None = None
               ) -> list[dict[str, Any]]:
    """The tables, each with ``links``: header -> glossary anchor, for the headers that
    are glossary terms not linked before (``seen``, updated), so a term links to its
    definition where it first appears."""
    seen = set() if seen is None else seen
    out = []
    for table in tables:
        links = {}
        for header in table["headers"]:
            target = _ANCHORS.get(header)
            if target is not None and target not in seen:
                seen.add(target)
                links[header] = target
        out.append({**table, "links": links})
    return out
