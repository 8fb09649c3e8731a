"""Plans stored as data: they read back equal, and reading them runs nothing else."""

from __future__ import annotations

import json

import pytest

import cqopt.charts as charts
from cqopt.charts.build import build_local
from cqopt.charts.spec import workload_specs
from cqopt.charts.store import (
    MANIFEST_CHECKSUM,
    ChartSetError,
    manifest_checksum,
    sha256_file,
    write_chart_set,
)
from cqopt.charts.workload import load_workload
from cqopt.optimizer.plans.codec import (
    PlanCodecError,
    plan_from_data,
    plan_to_data,
    plans_from_json,
    plans_json,
)
from cqopt.optimizer.plans.sql import plan_sql
from cqopt.optimizer.query.logical import parse_query
from cqopt.optimizer.rules.enumerate import enumerate_plans

QUERIES = [
    "SELECT TCP.src_host, TCP.dest_host FROM TCP WHERE TCP.dest_host = 2 WINDOW [1]",
    "SELECT * FROM TCP, UDP, SF WHERE TCP.src_host = UDP.dest_host AND "
    "UDP.dest_host = SF.dest_host AND TCP.bytes > 3 AND UDP.bytes < TCP.bytes WINDOW [1]",
    "SELECT TCP.src_host, COUNT(*), AVG(TCP.bytes) FROM TCP [RANGE 10 SECONDS] "
    "WHERE TCP.bytes > 100 GROUP BY TCP.src_host HAVING COUNT(*) > 2",
    "SELECT TCP.src_host FROM TCP [PARTITION BY TCP.src_host ROWS 10] "
    "WHERE TCP.bytes IN (1, 2, 3) OR TCP.bytes BETWEEN 10 AND 20 OR TCP.src_host <> 7",
    "SELECT TCP.src_host, UDP.bytes FROM TCP [RANGE 10 SECONDS], UDP [ROWS 200] "
    "WHERE TCP.src_host = UDP.dest_host AND TCP.bytes > 100",
]


@pytest.mark.parametrize("sql", QUERIES)
def test_every_candidate_plan_reads_back_equal(dec_catalog, sql):
    plans = enumerate_plans(parse_query(sql, dec_catalog))
    back = plans_from_json(plans_json(plans))
    assert [p.id for p in back] == [p.id for p in plans]
    for a, b in zip(plans, back):
        assert dict(a.graph.nodes(data=True)) == dict(b.graph.nodes(data=True))
        assert set(a.graph.edges) == set(b.graph.edges) and a.root == b.root
        assert a.explain() == b.explain()
        assert plan_sql(a, "spark", one_round=True) == plan_sql(b, "spark", one_round=True)


def test_plan_data_naming_another_class_is_refused(dec_catalog):
    plan = enumerate_plans(parse_query(QUERIES[1], dec_catalog))[0]
    data = json.loads(json.dumps(plan_to_data(plan)))
    text = json.dumps(data)
    assert '"sqlglot.expressions.' in text and '"class": "Selection"' in text
    for bad in (text.replace('"sqlglot.expressions.core.GT"', '"os.abort"', 1),
                text.replace('"class": "Selection"', '"class": "Popen"', 1),
                text.replace('"format": 1', '"format": 2', 1)):
        assert bad != text
        with pytest.raises(PlanCodecError):
            plan_from_data(json.loads(bad))
    nested = json.loads(text)  # a class hidden in an expression's type payload
    first_sql = next(_find(nested, "sql"))
    first_sql[0]["t"] = [{"c": "os.abort"}]
    with pytest.raises(PlanCodecError, match="'os.abort', which is no sqlglot expression"):
        plan_from_data(nested)
    data["id"] = "TCP⋈nothing"
    with pytest.raises(PlanCodecError, match="reads back as plan"):
        plan_from_data(data)


def _find(data, key):
    """Every value under ``key`` in nested JSON data."""
    if isinstance(data, dict):
        if key in data:
            yield data[key]
        for value in data.values():
            yield from _find(value, key)
    elif isinstance(data, list):
        for value in data:
            yield from _find(value, key)


def test_loading_a_chart_set_neither_parses_nor_enumerates(dec_catalog, workload_toml,
                                                           tmp_path, monkeypatch):
    specs = [s for s, _ in workload_specs(load_workload(workload_toml), dec_catalog, {"k": 3})]
    built = build_local(specs, dec_catalog, progress=False)
    out = write_chart_set(tmp_path / "cs", built, dec_catalog)

    def refused(*args, **kwargs):
        raise AssertionError("load planned a query")

    monkeypatch.setattr("cqopt.charts.lookup.candidate_plans", refused)
    monkeypatch.setattr("cqopt.optimizer.query.logical.parse_query", refused)
    loaded = charts.load(out)
    for chart in built:
        assert loaded[chart.spec.name].plan_ids == chart.plan_ids
    assert loaded.choose("Q1", {"sel.TCP": 0.1, "rate.TCP": 450.0}).plan_id == "TCP[σπ]"


def test_stored_plans_that_do_not_read_back_are_a_damaged_chart_set(dec_catalog,
                                                                    workload_toml, tmp_path):
    specs = [s for s, _ in workload_specs(load_workload(workload_toml), dec_catalog, {"k": 2})]
    out = write_chart_set(tmp_path / "cs", build_local(specs, dec_catalog, progress=False),
                          dec_catalog)
    manifest = json.loads((out / "manifest.json").read_text())
    entry = manifest["queries"]["Q1"]  # its selection holds a sqlglot expression
    plans = out / entry["plans_data"]
    text = plans.read_text()
    assert "sqlglot.expressions.core." in text
    plans.write_text(text.replace("sqlglot.expressions.core.", "os.", 1))
    entry["plans_sha256"] = sha256_file(plans)  # a consistent but hostile chart set
    manifest[MANIFEST_CHECKSUM] = manifest_checksum(manifest)
    (out / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ChartSetError, match=r"Q1\.plans\.json: damaged: its plans do not "
                                            r"read back .*no sqlglot expression.*rebuild"):
        charts.load(out)
