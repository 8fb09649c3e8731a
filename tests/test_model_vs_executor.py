"""Cost models against the reference executor (costmodel/validation.py)."""

from __future__ import annotations

import pytest

from cqopt.catalog import load_catalog
from cqopt.costmodel.validation import Setting, error_table, measure


QUERIES = {
    "Q1": "SELECT TCP.src_host, TCP.dest_host FROM TCP WHERE TCP.dest_host = 2 WINDOW [1]",
    "R1": "SELECT TCP.src_host FROM TCP WHERE TCP.bytes BETWEEN 10 AND 20 WINDOW [1]",
    "J2": "SELECT TCP.src_host, UDP.bytes FROM TCP, UDP WHERE TCP.src_host = UDP.dest_host "
          "AND TCP.dest_host = 2 WINDOW [1]",
}


@pytest.fixture(scope="module")
def rows(examples):
    catalog = load_catalog(examples / "dec-pkt.toml")
    settings = [Setting(r, s) for r in (100, 400) for s in (0.05, 0.5)]
    return measure(catalog, QUERIES, settings, seed=1)


def test_om_rates_match_measurement(rows):
    om = rows[rows.model == "om"]
    unary = om[om.kind.isin(["source", "selection"]) | om.operator.str.startswith("proj:T")]
    assert (unary.predicted_rate - unary.measured_rate).abs().max() < 1e-9
    assert (unary.predicted_queue - unary.measured_emitted_bytes).abs().max() < 1e-6
    # A join's jsel is measured on the raw windows; after a selection the pairs that
    # remain join at a slightly different rate in a finite window (independence).
    joins = om[(om.kind == "join") & (om.measured_rate >= 50)]
    error = (joins.predicted_rate - joins.measured_rate).abs() / joins.measured_rate
    assert error.median() < 0.1


def test_pipes_selection_rates_match_and_join_rate_is_the_continuous_one(rows):
    pipes = rows[rows.model == "pipes"]
    unary = pipes[pipes.kind.isin(["source", "selection"])]
    assert (unary.predicted_rate - unary.measured_rate).abs().max() < 1e-6
    joins = pipes[pipes.kind == "join"].set_index(["query", "rate", "sel", "plan", "operator"])
    om = rows[(rows.model == "om") & (rows.kind == "join")].set_index(joins.index.names)
    # each arrival probes the other window: twice the snapshot's pairs per round
    ratio = joins.predicted_rate / om.predicted_rate.reindex(joins.index)
    assert ratio.between(1.999, 2.001).all()


def test_pipes_join_state_is_both_windows(rows):
    joins = rows[(rows.model == "pipes") & (rows.kind == "join")]
    error = (joins.predicted_memory - joins.measured_held_bytes).abs() / joins.measured_held_bytes
    # (⌈l/d⌉ + ½)·s per side against λ·W·s: the half element weighs on tiny windows only
    assert error[joins.measured_held_bytes > 100 * 28].max() < 0.05
    assert error.max() < 0.3


def test_error_table_has_every_kind(rows):
    table = error_table(rows)
    assert {"source", "selection", "projection", "join"} <= set(table.kind)
    assert set(table.quantity) == {"rate", "queue", "state"}
    om_rate = table[(table.model == "om") & (table.quantity == "rate")].set_index("kind")
    assert om_rate.loc["selection", "max"] < 1e-9 and om_rate.loc["source", "max"] < 1e-9


def test_validation_needs_one_common_range_window(examples, monkeypatch):
    import cqopt.costmodel.validation as validation
    from cqopt.optimizer.query.errors import UnsupportedQueryError

    catalog = load_catalog(examples / "dec-pkt.toml")
    for sql in ("SELECT TCP.src_host FROM TCP [ROWS 10]",
                "SELECT * FROM TCP [RANGE 1 SECONDS], UDP [RANGE 2 SECONDS] "
                "WHERE TCP.src_host = UDP.src_host",
                "SELECT TCP.src_host FROM TCP [UNBOUNDED]"):
        with pytest.raises(UnsupportedQueryError, match="one \\[RANGE w\\] window"):
            measure(catalog, {"bad": sql}, [Setting(100, 0.5)])
    # the plans are enumerated once per query, not once per setting
    calls = []
    real = validation.enumerate_plans
    monkeypatch.setattr(validation, "enumerate_plans",
                        lambda *a, **k: calls.append(1) or real(*a, **k))
    rows = measure(catalog, {"Q1": QUERIES["Q1"]}, [Setting(100, 0.5), Setting(200, 0.1)])
    assert len(calls) == 1 and set(rows.rate) == {100, 200}
