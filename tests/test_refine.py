"""Charts that spend cells where plans change: statistics on axes, no silent defaults,
adaptive refinement, anorexic reduction, and the bad input around them."""

from __future__ import annotations

import json

import numpy as np
import pytest

import cqopt.charts as charts
from cqopt.catalog import Catalog
from cqopt.charts.build import build_chart, build_local
from cqopt.charts.kernel import ChartContext, point_utilities
from cqopt.charts.reduce import ReduceError, _greedy_cover, reduce_chart
from cqopt.charts.refine import RefineError, refine_chart
from cqopt.charts.spec import Axis, ChartSpec, workload_specs
from cqopt.charts.store import (
    FORMAT_VERSION,
    ChartSetError,
    read_query_data,
    write_chart_set,
)
from cqopt.charts.workload import workload_from_dict
from cqopt.cli.main import main
from cqopt.optimizer.query.errors import WorkloadError

JOIN = "SELECT * FROM A, B WHERE A.k = B.k WINDOW [1]"
Q2 = ("SELECT * FROM TCP, UDP, SF WHERE TCP.src_host = UDP.dest_host "
      "AND UDP.dest_host = SF.dest_host WINDOW [1]")


def join_catalog(distinct_a=None, distinct_b=None) -> Catalog:
    def column(d):
        return {"type": "int", **({"distinct": d} if d else {})}

    return Catalog.from_dict({"streams": {
        "A": {"rate": [10, 100], "columns": {"k": column(distinct_a), "v": "long"}},
        "B": {"rate": [10, 100], "columns": {"k": column(distinct_b), "w": "long"}}}})


def specs_of(catalog, query: dict, **defaults):
    workload = workload_from_dict({"defaults": defaults, "query": [{"name": "q", **query}]})
    return workload_specs(workload, catalog)[0][0]


# -- no silent defaults ---------------------------------------------------------------
def test_join_selectivity_defaults_to_one_over_the_larger_distinct_count():
    spec = specs_of(join_catalog(1000, 40), {"sql": JOIN})
    assert spec.fixed["jsel.A.B"] == pytest.approx(1 / 1000)
    assert spec.sources["jsel.A.B"] == "catalog distinct values"
    spec = specs_of(join_catalog(1000, None), {"sql": JOIN})  # one side undeclared
    assert (spec.fixed["jsel.A.B"], spec.sources["jsel.A.B"]) == (0.5, "default")
    spec = specs_of(join_catalog(), {"sql": JOIN, "fixed": {"jsel.A.B": 0.01}})
    assert (spec.fixed["jsel.A.B"], spec.sources["jsel.A.B"]) == (0.01, "workload")


def test_distinct_round_trips_and_leaves_other_fingerprints_alone():
    declared = join_catalog(1000, 40)
    assert Catalog.from_dict(declared.to_dict()).stream("A").column("k").distinct == 1000
    assert declared.fingerprint() != join_catalog().fingerprint()
    # A catalog that declares no distinct count hashes without the new key at all.
    assert "distinct" not in json.dumps(join_catalog().to_dict())


@pytest.mark.parametrize("bad", [0, -3, 1.5, "many"])
def test_bad_distinct_count(bad):
    with pytest.raises(Exception, match=r"streams\.A\.columns\.k\.distinct"):
        Catalog.from_dict({"streams": {"A": {"rate": [1, 2], "columns": {
            "k": {"type": "int", "distinct": bad}}}}})


def test_build_prints_and_records_every_fixed_statistic(dec_toml, workload_toml, tmp_path,
                                                         capsys):
    out = tmp_path / "cs"
    assert main(["build", "--catalog", dec_toml, "--workload", workload_toml, "--out",
                 str(out), "--engine", "local", "--quiet", "--k", "3"]) == 0
    printed = capsys.readouterr().out
    assert "Q2: fixed jsel.TCP.UDP = 0.001 (workload)" in printed
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["queries"]["Q2"]["sources"]["jsel.SF.UDP"] == "workload"
    assert manifest["format_version"] == FORMAT_VERSION


# -- statistics that move get axes ------------------------------------------------------
def test_a_statistic_with_a_range_becomes_an_axis(dec_catalog):
    spec = specs_of(dec_catalog, {"sql": Q2, "ranges": {"jsel.TCP.UDP": [0.0005, 0.01]}})
    assert [a.statistic for a in spec.axes] == ["rate.TCP", "rate.UDP", "rate.SF",
                                                "jsel.TCP.UDP"]
    assert "jsel.TCP.UDP" not in spec.fixed
    assert (spec.axes[-1].lo, spec.axes[-1].hi) == (0.0005, 0.01)


def test_an_axis_on_a_statistic_the_query_lacks_is_refused(dec_catalog):
    with pytest.raises(WorkloadError, match="not one this query depends on"):
        specs_of(dec_catalog, {"sql": Q2, "axes": ["rate.TCP", "sel.TCP"]})


# -- adaptive refinement ----------------------------------------------------------------
def q2_spec(dec_catalog, k=2):
    return specs_of(dec_catalog, {"sql": Q2, "fixed": {"jsel.TCP.UDP": 0.001,
                                                       "jsel.SF.UDP": 0.001,
                                                       "jsel.SF.TCP": 0.001}}, k=k)


def test_refined_leaves_tile_the_chart_within_budget(dec_catalog):
    context = ChartContext(q2_spec(dec_catalog), dec_catalog)
    chart = refine_chart(context, budget=120, depth=3)
    leaves = chart.leaves
    assert len(leaves.plan) <= 120 and leaves.level.max() >= 1
    _, side = leaves.bounds()
    assert int((side.astype(np.int64) ** 3).sum()) == int(np.prod(leaves.fine_shape))
    fine = leaves.expand()
    assert fine.min() >= 0
    # Every leaf's plan is the cheapest at its centroid, by the build's kernel.
    stats = leaves.centroids(context.spec.axes)
    assert np.array_equal(np.argmin(point_utilities(context, stats), axis=0), leaves.plan)


def test_refinement_beats_a_grid_of_as_many_cells(dec_catalog):
    """Refined cells go where plans change: fewer wrong plans than a grid of equal size."""
    spec = q2_spec(dec_catalog)
    context = ChartContext(spec, dec_catalog)
    refined = refine_chart(context, budget=64, depth=3)
    grid_spec = q2_spec(dec_catalog, k=4)  # 64 cells
    grid = build_chart(ChartContext(grid_spec, dec_catalog), progress=False)
    rng = np.random.default_rng(1)
    points = {a.statistic: rng.uniform(a.lo, a.hi, 4000) for a in spec.axes}
    truth = np.argmin(point_utilities(context, points), axis=0)

    def wrong(plan_index, shape):
        cells = [np.clip(((points[a.statistic] - a.lo) / (a.hi - a.lo) * k).astype(int), 0,
                         k - 1) for a, k in zip(spec.axes, shape)]
        return np.mean(plan_index[tuple(cells)] != truth)

    assert wrong(refined.leaves.expand(), refined.leaves.fine_shape) \
        < wrong(grid.plan_index, grid_spec.shape)


def test_refined_chart_set_round_trip(dec_catalog, tmp_path):
    spec = q2_spec(dec_catalog)
    [chart] = build_local([spec], dec_catalog, progress=False, refine=80, depth=3)
    out = write_chart_set(tmp_path / "cs", [chart], dec_catalog)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["format_version"] == FORMAT_VERSION
    assert manifest["queries"]["q"]["layout"] == "refined"
    assert manifest["queries"]["q"]["cells"] == len(chart.leaves.plan)
    loaded = charts.load(out)["q"]
    assert loaded.layout == "refined" and loaded.cells_stored == len(chart.leaves.plan)
    rng = np.random.default_rng(2)
    many = {a.statistic: rng.uniform(a.lo, a.hi, 300) for a in spec.axes}
    bulk = loaded.choose_many(many)
    lo, side = chart.leaves.bounds()
    for i in range(300):
        choice = loaded.choose({k: float(v[i]) for k, v in many.items()})
        assert choice.plan_id == loaded.plans[bulk.plan_index[i]].id
        # The leaf holding the point's fine cell decides, as stored.
        cell = np.array(choice.cell)
        inside = np.all((lo <= cell) & (cell < lo + side[:, None]), axis=1)
        assert np.flatnonzero(inside).size == 1
        assert chart.leaves.plan[inside][0] == bulk.plan_index[i]


def test_grid_only_readers_refuse_a_refined_chart(dec_catalog, tmp_path):
    [chart] = build_local([q2_spec(dec_catalog)], dec_catalog, progress=False, refine=40,
                          depth=2)
    out = write_chart_set(tmp_path / "cs", [chart], dec_catalog)
    loaded = charts.load(out)["q"]
    with pytest.raises(ChartSetError, match="refined .* not a k-regular grid"):
        loaded.cost
    entry = json.loads((out / "manifest.json").read_text())["queries"]["q"]
    with pytest.raises(ChartSetError, match="not a k-regular grid"):
        read_query_data(out, "q", entry, (2, 2, 2))


def test_a_chart_set_from_a_newer_format_is_refused(dec_catalog, tmp_path):
    from cqopt.charts.store import MANIFEST_CHECKSUM, manifest_checksum

    [chart] = build_local([q2_spec(dec_catalog)], dec_catalog, progress=False)
    out = write_chart_set(tmp_path / "cs", [chart], dec_catalog)
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["format_version"] = 99
    manifest[MANIFEST_CHECKSUM] = manifest_checksum(manifest)
    (out / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ChartSetError, match="version 99.*rebuild"):
        charts.load(out)


@pytest.mark.parametrize("budget, depth, fragment", [
    (7, None, "budget of 7 is below the 8 corner regions"),
    (100, 30, "depth 30 needs a finest index"),
])
def test_bad_refinement(dec_catalog, budget, depth, fragment):
    with pytest.raises(RefineError, match=fragment):
        build_local([q2_spec(dec_catalog)], dec_catalog, progress=False, refine=budget,
                    depth=depth)


# -- anorexic reduction -----------------------------------------------------------------
def test_greedy_cover_keeps_few_plans():
    # Plan 2 is within the threshold everywhere but optimal nowhere: it alone covers.
    covers = np.array([[1, 1, 0, 0], [0, 0, 1, 1], [1, 1, 1, 1]], dtype=bool)
    assert _greedy_cover(covers, np.ones(4), np.array([0, 0, 1, 1])) == [2]
    covers = np.array([[1, 1, 1, 0], [0, 0, 1, 1], [1, 0, 0, 0]], dtype=bool)
    assert _greedy_cover(covers, np.ones(4), np.array([0, 0, 1, 1])) == [0, 1]


@pytest.mark.parametrize("refine", [None, 100])
def test_reduction_stays_within_lambda(dec_catalog, refine):
    spec = specs_of(dec_catalog, {"sql": Q2}, k=6)  # jsel 0.5: plans close to each other
    context = ChartContext(spec, dec_catalog)
    chart = build_chart(context, progress=False) if refine is None else \
        refine_chart(context, refine, depth=2)
    lam = 0.3
    reduced = reduce_chart(context, chart, lam)
    leaves = reduced.leaves
    stats = leaves.centroids(chart.spec.axes) if leaves is not None else \
        {a.statistic: v for a, v in zip(spec.axes, np.meshgrid(
            *(a.centroids() for a in spec.axes), indexing="ij"))}
    utilities = point_utilities(context, {k: np.ravel(v) for k, v in stats.items()})
    chosen = utilities[reduced.plan_index.ravel(), np.arange(utilities.shape[1])]
    assert np.all(chosen <= (1 + lam) * utilities.min(axis=0) * (1 + 1e-12))
    assert reduced.plans_used <= chart.plans_used
    assert reduced.reduction["lambda"] == lam
    zero = reduce_chart(context, chart, 0.0)
    assert np.allclose(zero.cost, chart.cost)


def test_reduced_chart_records_lambda(dec_toml, workload_toml, tmp_path, capsys):
    out = tmp_path / "cs"
    assert main(["build", "--catalog", dec_toml, "--workload", workload_toml, "--out",
                 str(out), "--engine", "local", "--quiet", "--k", "4", "--reduce", "0.1"]) == 0
    assert "reduced at lambda 0.1" in capsys.readouterr().out
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["queries"]["Q2"]["reduce"]["lambda"] == 0.1
    assert charts.load(out)["Q2"].reduction["lambda"] == 0.1


@pytest.mark.parametrize("lam", [1.0, -0.1, 7])
def test_bad_lambda(dec_catalog, lam):
    with pytest.raises(ReduceError, match=r"\[0, 1\)"):
        build_local([q2_spec(dec_catalog)], dec_catalog, progress=False, reduce=lam)


# -- the command line -------------------------------------------------------------------
@pytest.mark.parametrize("args, fragment", [
    (["--reduce", "1"], "must lie in [0, 1)"),
    (["--reduce", "-0.5"], "must lie in [0, 1)"),
    (["--refine", "3"], "below the 4 corner regions"),
    (["--refine", "50", "--depth", "40"], "needs a finest index"),
    (["--depth", "3"], "add --refine"),
])
def test_build_bad_input_exits_2(dec_toml, workload_toml, tmp_path, capsys, args, fragment):
    code = main(["build", "--catalog", dec_toml, "--workload", workload_toml, "--out",
                 str(tmp_path / "cs"), "--engine", "local", "--quiet", *args])
    err = capsys.readouterr().err
    assert code == 2 and fragment in err and err.startswith("cqopt: error:")
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "cs").exists()


def test_build_axis_on_unknown_statistic_exits_2(dec_toml, tmp_path, capsys):
    workload = tmp_path / "w.toml"
    workload.write_text('[[query]]\nname = "Q1"\nsql = "SELECT TCP.src_host FROM TCP '
                        'WHERE TCP.dest_host = 2 WINDOW [1]"\naxes = ["rate.TCP", '
                        '"jsel.TCP.UDP"]\n')
    code = main(["build", "--catalog", dec_toml, "--workload", str(workload), "--out",
                 str(tmp_path / "cs"), "--engine", "local", "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and "jsel.TCP.UDP" in err and "not one this query depends on" in err


def test_refined_build_and_choose(dec_toml, workload_toml, tmp_path, capsys):
    out = tmp_path / "cs"
    assert main(["build", "--catalog", dec_toml, "--workload", workload_toml, "--out",
                 str(out), "--engine", "local", "--quiet", "--refine", "60"]) == 0
    capsys.readouterr()
    assert main(["choose", "--charts", str(out), "--query", "Q1", "--stat", "sel.TCP=0.05",
                 "--stat", "rate.TCP=500", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["plan"] == "TCP[σπ]"


def test_refined_diagram(dec_catalog, tmp_path):
    pytest.importorskip("matplotlib")
    from cqopt.charts.diagram import plan_diagram

    [chart] = build_local([q2_spec(dec_catalog)], dec_catalog, progress=False, refine=60,
                          depth=3, reduce=0.1)
    out = write_chart_set(tmp_path / "cs", [chart], dec_catalog)
    png = plan_diagram(charts.load(out)["q"], tmp_path / "q.png")
    assert png.stat().st_size > 1000


@pytest.mark.spark
def test_spark_refinement_matches_local(dec_catalog, spark):
    from cqopt.spark.chart_build import build_spark

    spec = q2_spec(dec_catalog)
    local = build_local([spec], dec_catalog, progress=False, refine=40, depth=2)[0]
    remote = build_spark([spec], dec_catalog, spark=spark, progress=False, refine=40,
                         depth=2)[0]
    assert np.array_equal(local.leaves.level, remote.leaves.level)
    assert np.array_equal(local.leaves.cell, remote.leaves.cell)
    assert np.array_equal(local.leaves.plan, remote.leaves.plan)
    assert local.leaves.cost.tobytes() == remote.leaves.cost.tobytes()


def test_a_chart_set_from_before_sources_and_layouts_still_loads(dec_catalog, tmp_path):
    from cqopt.charts.store import MANIFEST_CHECKSUM, manifest_checksum

    [chart] = build_local([q2_spec(dec_catalog)], dec_catalog, progress=False)
    out = write_chart_set(tmp_path / "cs", [chart], dec_catalog)
    manifest = json.loads((out / "manifest.json").read_text())
    del manifest["queries"]["q"]["sources"]  # as written before this change
    manifest[MANIFEST_CHECKSUM] = manifest_checksum(manifest)
    (out / "manifest.json").write_text(json.dumps(manifest))
    loaded = charts.load(out)["q"]
    assert loaded.layout == "grid" and loaded.spec.sources == {}
    assert np.array_equal(loaded.plan_index, chart.plan_index)


def _older_chart_set(out, chart, version: int):
    """Rewrite the one-query chart set ``out`` (of ``chart``) as format 1 or 3 wrote it."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from cqopt.charts.store import MANIFEST_CHECKSUM, manifest_checksum, sha256_file

    manifest = json.loads((out / "manifest.json").read_text())
    entry = manifest["queries"]["q"]
    del entry["costs"]
    if version == 1:  # one file of cell, plan (uint16) and cost
        del entry["sources"]
        pq.write_table(pa.table({
            "cell": pa.array(np.arange(chart.spec.n_cells, dtype=np.int64)),
            "plan": pa.array(chart.plan_index.ravel().astype(np.uint16)),
            "cost": pa.array(chart.cost.ravel())}), out / entry["data"])
        entry["sha256"] = sha256_file(out / entry["data"])
    else:  # version 3: the costs in a file of their own
        entry["cost_data"] = "q.cost.parquet"
        pq.write_table(pa.table({"cost": pa.array(chart.cost.ravel())}), out / "q.cost.parquet")
        entry["cost_sha256"] = sha256_file(out / "q.cost.parquet")
    manifest["format_version"] = version
    manifest[MANIFEST_CHECKSUM] = manifest_checksum(manifest)
    (out / "manifest.json").write_text(json.dumps(manifest))
    return out


@pytest.mark.parametrize("version", [1, 3])
def test_an_older_chart_set_still_loads_with_its_stored_costs(dec_catalog, tmp_path, version):
    """Format 1 kept a grid's costs beside cell and plan; 3 in a file of their own."""
    [chart] = build_local([q2_spec(dec_catalog)], dec_catalog, progress=False)
    out = write_chart_set(tmp_path / "cs", [chart], dec_catalog)
    # Costs no model gives, so that the test sees them read, not worked out again.
    chart.cost = np.arange(chart.cost.size, dtype=np.float64).reshape(chart.cost.shape)
    _older_chart_set(out, chart, version)
    loaded = charts.load(out)["q"]
    assert loaded.plan_index.dtype == np.uint8
    assert np.array_equal(loaded.plan_index, chart.plan_index)
    assert loaded.cost.tobytes() == chart.cost.tobytes()


def test_a_grid_whose_costs_are_damaged_says_so_when_they_are_read(dec_catalog, tmp_path):
    [chart] = build_local([q2_spec(dec_catalog)], dec_catalog, progress=False)
    out = _older_chart_set(write_chart_set(tmp_path / "cs", [chart], dec_catalog), chart, 3)
    loaded = charts.load(out)["q"]  # a lookup reads no costs
    cost_file = out / "q.cost.parquet"
    cost_file.write_bytes(cost_file.read_bytes()[:-9] + b"x" * 9)
    with pytest.raises(ChartSetError, match=r"q\.cost\.parquet: damaged: its sha256"):
        loaded.cost
