"""Workload files: shape, overrides and messages."""

from __future__ import annotations

import pytest

from cqopt.charts.workload import load_workload, workload_from_dict
from cqopt.optimizer.query.errors import WorkloadError


def test_example_workload(examples):
    w = load_workload(examples / "workload.toml")
    assert [q.name for q in w.queries] == ["Q1", "Q2"]
    assert w.setting(w.query("Q1"), "k") == 10
    assert w.setting(w.query("Q1"), "model") == "om"


def test_overrides():
    w = workload_from_dict({"defaults": {"k": 5}, "query": [
        {"name": "a", "sql": "SELECT 1", "k": 7, "fixed": {"sel.S": 0.2}}]})
    assert w.setting(w.queries[0], "k") == 7
    assert w.setting(w.queries[0], "weights", [0.4, 0.6]) == [0.4, 0.6]


@pytest.mark.parametrize("data, fragment", [
    ({}, "no [[query]]"),
    ({"query": [{"name": "a"}]}, "query[0].sql"),
    ({"query": [{"sql": "x"}]}, "query[0].name"),
    ({"query": [{"name": "a", "sql": "x"}, {"name": "a", "sql": "y"}]}, "duplicate"),
    ({"defaults": {"k": 0}, "query": [{"name": "a", "sql": "x"}]}, "defaults.k"),
    ({"defaults": {"model": "x"}, "query": [{"name": "a", "sql": "x"}]}, "unknown cost model"),
    ({"defaults": {"weights": [1]}, "query": [{"name": "a", "sql": "x"}]}, "weights"),
    ({"defaults": {"weights": [0, 0]}, "query": [{"name": "a", "sql": "x"}]},
     "at least one weight > 0"),
    ({"query": [{"name": "a", "sql": "x", "weights": [0.0, 0, 0]}]}, "query[0].weights"),
    ({"query": [{"name": "a", "sql": "x", "ranges": {"rate.S": [5, 1]}}]}, "ranges.rate.S"),
    ({"query": [{"name": "a", "sql": "x", "kk": 1}]}, "did you mean 'k'"),
    ({"queries": []}, "did you mean 'query'"),
])
def test_bad_workloads(data, fragment):
    with pytest.raises(WorkloadError) as info:
        workload_from_dict(data, "w.toml")
    assert str(info.value).startswith("w.toml: ") and fragment in str(info.value)


def _qos_query(**keys):
    return {"query": [{"name": "C", "sql": "SELECT COUNT(*) FROM TCP WINDOW [1]", **keys}]}


def test_a_querys_bounds_under_overload_are_read_and_kept_apart_from_its_chart():
    """issue 22: deadline, min_kept, error_bound and an input/quality table per query."""
    from cqopt.charts.workload import qos

    w = workload_from_dict(_qos_query(k=4, deadline=0.5, min_kept=0.2, error_bound=0.05,
                                      quality=[[0, 1.0], [0.2, 0.8], [0.5, 0.4]]))
    assert qos(w.queries[0]) == {"deadline": 0.5, "min_kept": 0.2, "error_bound": 0.05,
                                 "quality": ((0.0, 1.0), (0.2, 0.8), (0.5, 0.4))}
    assert w.settings(w.queries[0]).k == 4  # the chart's settings do not see them


@pytest.mark.parametrize("keys, fragment", [
    ({"deadline": 0}, "query[0].deadline = 0: needs a number of seconds > 0"),
    ({"deadline": "soon"}, "query[0].deadline = 'soon': expected a number"),
    ({"min_kept": 1.5}, "query[0].min_kept = 1.5: needs a share in [0, 1]"),
    ({"error_bound": 0}, "query[0].error_bound = 0: needs a relative error in (0, 1)"),
    ({"quality": [[0, 1.0], [0.5, 0.9], [0.3, 0.8]]}, "the table is not monotone"),
    ({"quality": [[0, 0.5], [0.5, 0.9]]}, "the table is not monotone"),
    ({"quality": [[0, 1.0, 3]]}, "expected rows [share dropped, quality]"),
])
def test_bad_bounds_are_one_line_naming_the_key(keys, fragment):
    with pytest.raises(WorkloadError) as err:
        workload_from_dict(_qos_query(**keys))
    assert fragment in str(err.value) and "\n" not in str(err.value)


def test_an_error_bound_on_a_query_without_aggregate_is_refused(examples):
    from cqopt.catalog import load_catalog
    from cqopt.charts.spec import workload_specs

    w = workload_from_dict({"query": [{"name": "J", "error_bound": 0.05,
                                       "sql": "SELECT * FROM TCP WINDOW [1]"}]})
    with pytest.raises(WorkloadError, match="only an aggregate's answer has a relative error"):
        workload_specs(w, load_catalog(examples / "dec-pkt.toml"))
