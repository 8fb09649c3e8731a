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
