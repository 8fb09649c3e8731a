"""A chart set rebuilt with ``--force`` while it is being loaded: every load gives the old
set or the new one whole, never one build's plan index under the other's manifest, and
never a false "damaged" (scripts/stress_rebuild_load.py runs the same at scale)."""

from __future__ import annotations

import importlib.util

import pytest

import cqopt.charts as charts
import cqopt.charts.lookup as lookup
from cqopt.charts.build import build_local
from cqopt.charts.spec import workload_specs
from cqopt.charts.store import write_chart_set
from cqopt.charts.workload import load_workload
from cqopt.examples import example


@pytest.fixture(scope="module")
def stress(repo_root):
    spec = importlib.util.spec_from_file_location(
        "stress_rebuild_load", repo_root / "scripts" / "stress_rebuild_load.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def builds(dec_catalog):
    """The example workload's charts at k = 3 under each model (Q1's differ)."""
    workload = load_workload(example("workload.toml"))
    return {model: build_local([s for s, _ in workload_specs(workload, dec_catalog,
                                                             {"k": 3, "model": model})],
                               dec_catalog, progress=False)
            for model in ("om", "pipes")}


def _whole(chart_set, builds) -> str:
    """The model whose build ``chart_set`` is, whole; fails on a mix."""
    models = {chart.spec.model for chart in chart_set.charts.values()}
    assert len(models) == 1, f"a set of two builds: {models}"
    model = models.pop()
    for built in builds[model]:
        loaded = chart_set[built.spec.name]
        assert loaded.plan_ids == tuple(built.plan_ids)
        assert loaded.plan_index.tolist() == built.plan_index.tolist(), \
            f"{built.spec.name}: another build's plan index under the {model} manifest"
    return model


@pytest.mark.parametrize("swap", ["exchange", "renames"])
def test_a_rebuild_in_the_middle_of_a_load_gives_one_whole_set(dec_catalog, builds, tmp_path,
                                                              monkeypatch, swap):
    if swap == "renames":
        monkeypatch.setenv("CQOPT_SWAP", "renames")
    out = tmp_path / "charts"
    write_chart_set(out, builds["om"], dec_catalog)
    read_query_data = lookup.read_query_data
    rebuilt = []

    def rebuild_first(*args, **kwargs):
        if not rebuilt:  # the manifest is read; now the set is replaced under the load
            write_chart_set(out, builds["pipes"], dec_catalog, force=True)
            rebuilt.append(True)
        return read_query_data(*args, **kwargs)

    monkeypatch.setattr(lookup, "read_query_data", rebuild_first)
    loaded = charts.load(out)
    assert rebuilt
    assert _whole(loaded, builds) == "pipes"


def test_a_rebuild_loop_beside_a_load_loop_gives_no_mix_and_no_false_error(stress, tmp_path):
    counts = stress.stress(tmp_path, seconds=12.0, k=3)
    assert counts["mixed"] == 0 and counts["false_errors"] == 0, counts["details"]
    assert counts["builds"] >= 3, "the rebuilds must overlap the loads"
    assert counts["whole"]["om"] > 0 and counts["whole"]["pipes"] > 0
