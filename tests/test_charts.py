"""Charts: specs, the local build, the on-disk format, lookups, diagrams, the CLI."""

from __future__ import annotations

import json
import subprocess
import sys
import threading

import numpy as np
import pytest

import cqopt.charts as charts
from cqopt.catalog import load_catalog
from cqopt.charts.build import build_local
from cqopt.charts.kernel import ChartContext
from cqopt.charts.spec import Axis, ChartSpec, default_axes, make_spec, workload_specs
from cqopt.charts.store import ChartSetError, manifest_checksum, write_chart_set
from cqopt.charts.workload import load_workload, workload_from_dict
from cqopt.cli.main import main
from cqopt.costmodel import Utility, make_model
from cqopt.optimizer.query.errors import QueryError, WorkloadError
from cqopt.optimizer.query.logical import parse_query


@pytest.fixture(scope="module")
def dec(dec_toml):
    return load_catalog(dec_toml)


@pytest.fixture(scope="module")
def specs(workload_toml, dec):
    return [s for s, _ in workload_specs(load_workload(workload_toml), dec, {"k": 8})]


@pytest.fixture(scope="module")
def chart_dir(tmp_path_factory, specs, dec):
    out = tmp_path_factory.mktemp("charts") / "set"
    write_chart_set(out, build_local(specs, dec, progress=False), dec)
    return out


def test_default_axes_follow_the_paper(dec):
    q1 = parse_query("SELECT TCP.src_host FROM TCP WHERE TCP.dest_host = 2 WINDOW [1]", dec)
    assert default_axes(q1) == ["sel.TCP", "rate.TCP"]
    q0 = parse_query("SELECT TCP.src_host FROM TCP WINDOW [1]", dec)
    assert default_axes(q0) == ["rate.TCP"]
    q2 = parse_query("SELECT * FROM TCP, UDP WHERE TCP.src_host = UDP.dest_host "
                     "AND TCP.bytes > 3 WINDOW [1]", dec)
    assert default_axes(q2) == ["rate.TCP", "rate.UDP"]
    spec = make_spec("q", "x", q2, dec, {})
    assert spec.fixed == {"sel.TCP": 0.5, "jsel.TCP.UDP": 0.5}
    assert spec.axes[0] == Axis("rate.TCP", 100.0, 1000.0, 10)


def test_partition_boundaries_include_lo():
    ax = Axis("rate.S", 100.0, 1000.0, 9)
    assert ax.edges()[0] == 100.0 and ax.edges()[-1] == pytest.approx(1000.0)
    np.testing.assert_allclose(np.diff(ax.edges()), 100.0)
    idx, clamped = ax.cells(np.array([100.0, 199.9, 200.0, 1000.0, 50.0]))
    assert idx.tolist() == [0, 0, 1, 8, 0] and clamped.tolist() == [False] * 4 + [True]


@pytest.mark.parametrize("settings, fragment", [
    ({"axes": ["rate.XYZ"]}, "not one this query depends on"),
    # Without "axes" a range makes its statistic an axis; with them, it must be one.
    ({"axes": ["rate.TCP", "rate.UDP"], "ranges": {"jsel.TCP.UDP": [0, 0.5]}}, "not an axis"),
    ({"fixed": {"rate.TCP": 3}}, "both an axis and fixed"),
    ({"axes": ["rate.TCP", "rate.TCP"]}, "named twice"),
    ({"axes": ["jsel.TCP.UDP"], "ranges": {"jsel.TCP.UDP": [0, 2]}}, "[0, 1]"),
])
def test_bad_chart_settings(dec, settings, fragment):
    q = parse_query("SELECT * FROM TCP, UDP WHERE TCP.src_host = UDP.dest_host WINDOW [1]", dec)
    with pytest.raises(WorkloadError) as info:
        make_spec("q", "x", q, dec, settings)
    assert fragment in str(info.value)


def test_local_build_is_the_argmin_at_each_centroid(dec, specs):
    for spec, chart in zip(specs, build_local(specs, dec, progress=False)):
        context = ChartContext(spec, dec)
        model = make_model(spec.model, dec, spec.memory_unit)
        utility = Utility.from_weights(spec.weights)
        assert list(chart.plan_ids) == sorted(chart.plan_ids)
        for cell in [0, spec.n_cells // 3, spec.n_cells - 1]:
            stats = spec.centroid_stats(np.array([cell]))
            scores = [float(np.ravel(utility(model.cost(p, stats)))[0]) for p in context.plans]
            assert chart.plan_index.ravel()[cell] == int(np.argmin(scores))
            assert chart.cost.ravel()[cell] == pytest.approx(min(scores))


def test_ties_go_to_the_smallest_plan_id(dec):
    # A query with no selection: both plans are one; a projection-only pair of
    # candidates does not exist, so force equal costs with zero weights on memory.
    spec = ChartSpec("t", "SELECT * FROM TCP, UDP WHERE TCP.src_host = UDP.dest_host WINDOW [1]",
                     (Axis("rate.TCP", 100, 200, 2),), {"rate.UDP": 100.0, "jsel.TCP.UDP": 0.1})
    chart = build_local([spec], dec, progress=False)[0]
    assert chart.plan_index.tolist() == [0, 0]


def test_chart_set_round_trip_and_choose(chart_dir, specs):
    cs = charts.load(chart_dir)
    assert set(cs.charts) == {"Q1", "Q2"}
    manifest = json.loads((chart_dir / "manifest.json").read_text())
    assert manifest["format_version"] == 4 and manifest["catalog_fingerprint"]
    q1 = manifest["queries"]["Q1"]
    assert {"sql", "plans", "axes", "fixed", "data", "sha256", "model", "weights",
            "memory_unit"} <= set(q1)
    low = cs.choose("Q1", {"sel.TCP": 0.02, "rate.TCP": 500})
    high = cs.choose("Q1", {"sel.TCP": 0.98, "rate.TCP": 500})
    assert (low.plan_id, high.plan_id) == ("TCP[σπ]", "TCP[πσ]")
    assert low.clamped == () and low.cell == (0, 3)  # (500 - 100) / 900 · 8 = 3.6
    edge = cs.choose("Q1", {"sel.TCP": 1.0, "rate.TCP": 1000.0})
    assert edge.cell == (7, 7) and edge.clamped == ()


def test_choose_clamps_and_rejects(chart_dir):
    cs = charts.load(chart_dir)
    c = cs.choose("Q2", {"rate.TCP": 5, "rate.UDP": 10_000, "rate.SF": 300})
    assert c.cell[:2] == (0, 7) and set(c.clamped) == {"rate.TCP", "rate.UDP"}
    for bad, fragment in [({"rate.TCP": float("nan")}, "NaN"),
                          ({"rate.TCP": -1}, ">= 0"),
                          ({"rate.TCP": float("inf")}, "finite")]:
        with pytest.raises(QueryError, match=fragment):
            cs.choose("Q2", {"rate.UDP": 100, "rate.SF": 100, **bad})
    with pytest.raises(QueryError, match=r"\[0, 1\]"):
        cs.choose("Q1", {"sel.TCP": 1.2, "rate.TCP": 100})
    with pytest.raises(ChartSetError, match="rate.SF is missing"):
        cs.choose("Q2", {"rate.TCP": 100, "rate.UDP": 100})
    with pytest.raises(ChartSetError, match="did you mean 'Q1'"):
        cs.choose("Q11", {})


def test_choose_many_equals_choose(chart_dir):
    cs = charts.load(chart_dir)
    rng = np.random.default_rng(3)
    stats = {"rate.TCP": rng.uniform(0, 1200, 500), "rate.UDP": rng.uniform(50, 600, 500),
             "rate.SF": rng.uniform(0, 700, 500)}
    many = cs.choose_many("Q2", stats)
    for i in range(0, 500, 7):
        one = cs.choose("Q2", {k: v[i] for k, v in stats.items()})
        assert many.plan_ids[i] == one.plan_id
        assert tuple(many.cells[i]) == one.cell
        assert bool(many.clamped[i]) == bool(one.clamped)
    bad = stats["rate.SF"].copy()
    bad[3] = -4.0
    with pytest.raises(QueryError, match="row 3"):
        cs.choose_many("Q2", {**stats, "rate.SF": bad})
    with pytest.raises(ChartSetError, match="do not broadcast"):
        cs.choose_many("Q2", {**stats, "rate.SF": np.r_[1.0, 2.0, 3.0, 4.0]})
    grid = cs.choose_many("Q2", {"rate.TCP": np.array([[200.0], [800.0]]),
                                 "rate.UDP": np.array([150.0, 300.0, 450.0]), "rate.SF": 100.0})
    assert grid.plan_index.shape == (6,)  # (2, 1) x (3,) x () broadcast, flattened


def test_concurrent_readers_agree(chart_dir):
    cs = charts.load(chart_dir)
    rng = np.random.default_rng(5)
    points = [{"sel.TCP": s, "rate.TCP": r}
              for s, r in zip(rng.uniform(0, 1, 2000), rng.uniform(100, 1000, 2000))]
    expected = [cs.choose("Q1", p).plan_id for p in points]
    results, errors = {}, []

    def reader(n):
        try:
            results[n] = [cs.choose("Q1", p).plan_id for p in points]
        except Exception as err:  # pragma: no cover - reported below
            errors.append(err)

    threads = [threading.Thread(target=reader, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and all(r == expected for r in results.values())


def test_staleness(chart_dir, dec):
    cs = charts.load(chart_dir)
    assert not cs.check(dec).stale
    data = dec.to_dict()
    data["operators"]["equi_join"] = 1000
    from cqopt.catalog import Catalog
    report = cs.check(Catalog.from_dict(data))
    assert report.stale and "rebuild" in str(report)


def test_load_rejects_damaged_and_foreign_directories(chart_dir, tmp_path):
    import shutil
    with pytest.raises(ChartSetError, match="no such chart set"):
        charts.load(tmp_path / "absent")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ChartSetError, match="no manifest.json"):
        charts.load(tmp_path / "empty")
    damaged = tmp_path / "damaged"
    shutil.copytree(chart_dir, damaged)
    with open(damaged / "Q1.parquet", "r+b") as f:
        f.seek(40)
        f.write(b"\x00\x01\x02")
    with pytest.raises(ChartSetError, match="Q1.parquet: damaged: its sha256"):
        charts.load(damaged)
    (damaged / "Q1.parquet").unlink()
    with pytest.raises(ChartSetError, match="data file Q1.parquet is missing"):
        charts.load(damaged)
    future = tmp_path / "future"
    shutil.copytree(chart_dir, future)
    manifest = json.loads((future / "manifest.json").read_text())
    manifest["format_version"] = 99
    (future / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ChartSetError, match="version 99"):
        charts.load(future)
    (future / "manifest.json").write_text('{"format": "something-else"}')
    with pytest.raises(ChartSetError, match="not a cqopt chart set"):
        charts.load(future)
    (future / "manifest.json").write_text("{not json")
    with pytest.raises(ChartSetError, match="not readable JSON"):
        charts.load(future)


class Boom(Exception):
    pass


def test_failed_write_leaves_nothing_and_keeps_the_old_set(chart_dir, dec, specs, tmp_path,
                                                           monkeypatch):
    import shutil
    out = tmp_path / "set"
    shutil.copytree(chart_dir, out)
    before = sorted(p.name for p in out.iterdir())
    built = build_local(specs, dec, progress=False)
    with pytest.raises(ChartSetError, match="--force"):
        write_chart_set(out, built, dec)

    def explode(*args, **kwargs):
        raise Boom("disk full")

    monkeypatch.setattr("charts.store.json.dump", explode)
    with pytest.raises(Boom):
        write_chart_set(out, built, dec, force=True)
    assert sorted(p.name for p in out.iterdir()) == before
    assert [p.name for p in tmp_path.iterdir()] == ["set"]  # no temporary left behind
    charts.load(out)
    monkeypatch.undo()
    with pytest.raises(Boom):
        monkeypatch.setattr("charts.store.pq.write_table", explode)
        write_chart_set(tmp_path / "fresh", built, dec)
    assert not (tmp_path / "fresh").exists()


def test_killed_build_leaves_no_partial_chart_set(dec_toml, workload_toml, tmp_path):
    """A build killed mid-way leaves no directory at --out."""
    out = tmp_path / "set"
    code = ("import sys, os, signal; import cqopt.charts.store as s\n"
            "real = s.pq.write_table\n"
            "def slow(*a, **k):\n"
            "    real(*a, **k); os.kill(os.getpid(), signal.SIGKILL)\n"
            "s.pq.write_table = slow\n"
            "from cqopt.cli.main import main\n"
            f"main(['build', '--catalog', {dec_toml!r}, '--workload', {workload_toml!r}, "
            f"'--out', {str(out)!r}, '--engine', 'local', '--quiet'])\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, cwd=tmp_path)
    assert done.returncode != 0
    assert not out.exists()


def test_runtime_api_imports_neither_spark_nor_matplotlib(chart_dir):
    code = ("import sys, charts\n"
            f"cs = charts.load({str(chart_dir)!r})\n"
            "cs.choose('Q1', {'sel.TCP': 0.5, 'rate.TCP': 300})\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('pyspark', 'matplotlib', 'py4j', 'pandas')))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    assert done.stdout.strip() == "[]"


def test_diagram_2d_and_sliced_3d(chart_dir, tmp_path):
    from cqopt.charts.diagram import plan_diagram, slice_points
    cs = charts.load(chart_dir)
    assert len(slice_points(cs["Q2"])) == 4
    assert slice_points(cs["Q2"], {"rate.SF": 480}) == [{"rate.SF": 7}]
    for name in ("Q1", "Q2"):
        out = plan_diagram(cs[name], tmp_path / f"{name}.png")
        assert out.stat().st_size > 10_000 and out.read_bytes()[:4] == b"\x89PNG"


def test_plans_are_numbered_by_their_share_of_the_area(chart_dir):
    from cqopt.charts.diagram import plan_numbers
    chart = charts.load(chart_dir)["Q2"]
    numbered = plan_numbers(chart)
    shares = [share for _, share in numbered]
    assert shares == sorted(shares, reverse=True) and sum(shares) == pytest.approx(1.0)
    counts = np.bincount(chart.plan_index.ravel(), minlength=len(chart.plans))
    assert numbered[0][0] == int(np.argmax(counts))  # P1 covers the most cells
    assert {i for i, _ in numbered} == set(np.flatnonzero(counts).tolist())


def test_slices_say_which_are_shown_and_why(chart_dir):
    from cqopt.charts.diagram import choose_slices
    chart = charts.load(chart_dir)["Q2"]
    k = chart.spec.axes[2].k
    points, note = choose_slices(chart)
    assert len(points) == 4 and note.startswith(f"4 of {k} slices of rate.SF, evenly spaced")
    points, note = choose_slices(chart, {"rate.SF": 480})
    assert points == [{"rate.SF": 7}] and note == "rate.SF = 480 (given)"
    sf = chart.spec.axes[2]
    visits = [sf.centroids()[2]] * 5 + [sf.centroids()[6]] * 3
    points, note = choose_slices(chart, overlay={"rate.SF": visits})
    assert points == [{"rate.SF": 2}, {"rate.SF": 6}]
    assert note == f"2 of {k} slices of rate.SF: every one the path visits"
    assert choose_slices(charts.load(chart_dir)["Q1"]) == ([{}], "")


def test_the_estimate_path_is_drawn_only_on_its_own_slice(chart_dir):
    from cqopt.charts.diagram import choose_slices, slice_members
    chart = charts.load(chart_dir)["Q2"]
    rng = np.random.default_rng(1)
    path = {a.statistic: rng.uniform(a.lo, a.hi, 200) for a in chart.spec.axes}
    points, _ = choose_slices(chart, overlay=path)
    by_name = {a.statistic: a for a in chart.spec.axes}
    members = np.array([slice_members(by_name, point, path) for point in points])
    assert (members.sum(axis=0) <= 1).all()  # no point on two slices
    cells = chart.spec.axes[2].cells(path["rate.SF"])[0]
    for point, member in zip(points, members):
        assert member.tolist() == (cells == point["rate.SF"]).tolist()


def test_diagram_legend_title_and_slices_in_the_image(chart_dir, tmp_path):
    import matplotlib
    from cqopt.charts.diagram import plan_diagram, plan_numbers
    chart = charts.load(chart_dir)["Q2"]
    with matplotlib.rc_context({"svg.fonttype": "none"}):  # text stays text in the SVG
        svg = plan_diagram(chart, tmp_path / "q2.svg").read_text(encoding="utf-8")
    (first, share), = plan_numbers(chart)[:1]
    assert f"P1 ({share:.1%}) {chart.plans[first].id}" in svg
    assert "share of the chart" in svg
    assert "fixed: jsel.SF.TCP = 0.001, jsel.SF.UDP = 0.001, jsel.TCP.UDP = 0.001" in svg
    assert f"shown: 4 of {chart.spec.axes[2].k} slices of rate.SF, evenly spaced" in svg


def test_show_plans_prints_each_tree_beside_its_number(chart_dir, capsys):
    from cqopt.charts.diagram import plan_numbers
    assert main(["show", "--charts", str(chart_dir), "--query", "Q2", "--plans"]) == 0
    out = capsys.readouterr().out
    chart = charts.load(chart_dir)["Q2"]
    for n, (index, share) in enumerate(plan_numbers(chart), start=1):
        plan = chart.plans[index]
        block = out.split(f"P{n} ")[1].split("\n\n")[0]
        assert f"{share:.1%} of the chart  {plan.id}" in block
        assert all(f"    {line}" in block for line in plan.explain().splitlines())
    assert main(["show", "--charts", str(chart_dir), "--query", "Q2"]) == 2
    assert "--out FILE.png" in capsys.readouterr().err


def test_cli_build_choose_show(dec_toml, workload_toml, tmp_path, capsys):
    out = tmp_path / "set"
    args = ["build", "--catalog", dec_toml, "--workload", workload_toml, "--out", str(out),
            "--engine", "local", "--k", "5", "--quiet"]
    assert main(args) == 0
    summary = capsys.readouterr().out
    assert "Q1" in summary and "wrote" in summary
    assert main(args) == 2
    assert "--force" in capsys.readouterr().err
    assert main([*args, "--force", "--weights", "0.9,0.1", "--model", "pipes"]) == 0
    capsys.readouterr()
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["queries"]["Q1"]["model"] == "pipes"
    assert manifest["queries"]["Q1"]["weights"] == [0.9, 0.1]
    assert main(["choose", "--charts", str(out), "--query", "Q1", "--stat", "sel.TCP=0.1",
                 "--stat", "rate.TCP=5000", "--json"]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert answer["query"] == "Q1" and answer["clamped"] == ["rate.TCP"]
    assert answer["cell"] == [0, 4] and answer["plan"]
    assert main(["choose", "--charts", str(out), "--query", "Q1", "--stat", "sel.TCP"]) == 2
    assert "NAME=VALUE" in capsys.readouterr().err
    assert main(["show", "--charts", str(out), "--query", "Q2", "--out",
                 str(tmp_path / "q2.png")]) == 0
    assert (tmp_path / "q2.png").exists()
    assert main(["build", "--catalog", dec_toml, "--workload", workload_toml, "--out",
                 str(tmp_path / "x"), "--weights", "a,b", "--engine", "local"]) == 2


def test_workload_overrides_reach_the_spec(dec):
    w = workload_from_dict({"defaults": {"k": 4, "model": "pipes"}, "query": [
        {"name": "a", "sql": "SELECT TCP.src_host FROM TCP WHERE TCP.bytes > 100 WINDOW [2]",
         "k": 6, "ranges": {"rate.TCP": [200, 300]}}]})
    (spec, _), = workload_specs(w, dec)
    assert spec.shape == (6, 6) and spec.model == "pipes"
    assert spec.axes[1] == Axis("rate.TCP", 200.0, 300.0, 6)
    (spec, _), = workload_specs(w, dec, {"k": 3})
    assert spec.shape == (3, 3)


def test_pipes_with_tuples_is_a_workload_error(dec, capsys, tmp_path):
    w = workload_from_dict({"defaults": {"model": "pipes", "memory_unit": "tuples"},
                            "query": [{"name": "a", "sql": "SELECT TCP.src_host FROM TCP "
                                                           "WHERE TCP.bytes > 1 WINDOW [1]"}]})
    with pytest.raises(WorkloadError, match="bytes only"):
        workload_specs(w, dec)


def test_axis_cells_take_lists_and_loaded_charts_name_their_plans(chart_dir):
    idx, outside = Axis("sel.S", 0.0, 1.0, 4).cells([0.2, 1.5])
    assert idx.tolist() == [0, 3] and outside.tolist() == [False, True]
    assert charts.load(chart_dir)["Q1"].plan_ids == ("TCP[πσ]", "TCP[σπ]")


def test_a_loaded_chart_holds_one_byte_a_cell_and_works_out_costs_when_asked(chart_dir, specs,
                                                                              dec):
    built = {c.spec.name: c for c in build_local(specs, dec, progress=False)}
    for name, chart in charts.load(chart_dir).items():
        assert chart.plan_index.dtype == np.uint8 and chart._cost is None
        assert np.array_equal(chart.plan_index, built[name].plan_index)
        assert chart._flat.obj is not None and chart._flat.nbytes == chart.plan_index.nbytes
        # Worked out now, from the plan index: the build's floats, bit for bit.
        assert chart.cost.tobytes() == built[name].cost.tobytes()
        assert chart._cost is not None
    assert not list(chart_dir.glob("*.cost.parquet"))  # a chart set stores no costs


def test_a_chart_of_more_than_256_plans_indexes_in_two_bytes():
    from types import SimpleNamespace as Plan

    spec = ChartSpec("q", "SELECT 1", (Axis("sel.S", 0.0, 1.0, 300),))
    plans = [Plan(id=f"P{i:03d}") for i in range(300)]
    chart = charts.QueryChart(spec, plans, np.arange(300), None)
    assert chart.plan_index.dtype == np.uint16
    assert chart.choose({"sel.S": 0.999}).plan_id == "P299"


def test_cli_build_picks_the_engine_by_size_and_says_why(dec_toml, workload_toml, tmp_path,
                                                        capsys, dec, specs, monkeypatch):
    """issue 21: without --engine, small charts build in this process, large ones on Spark."""
    import cqopt.charts.build as build_module

    out = tmp_path / "set"
    assert main(["build", "--catalog", dec_toml, "--workload", workload_toml, "--out", str(out),
                 "--k", "8"]) == 0
    captured = capsys.readouterr()
    assert "building in this process:" in captured.err and "local engine" in captured.out
    engine, why = build_module.pick_engine(specs, dec)
    assert engine == "local"
    # Past the crossover (here: a slower machine, as far as the rule knows) it is Spark.
    monkeypatch.setattr(build_module, "SECONDS_PER_CELL_PLAN", 1.0)
    engine, why = build_module.pick_engine(specs, dec)
    assert engine == "spark" and "--engine local to stay in this process" in why


def test_cli_build_on_spark_uses_the_running_session(dec_toml, workload_toml, spark, tmp_path,
                                                     capsys, dec, specs):
    out = tmp_path / "set"
    assert main(["build", "--catalog", dec_toml, "--workload", workload_toml, "--out", str(out),
                 "--k", "8", "--quiet", "--engine", "spark"]) == 0
    assert "spark engine" in capsys.readouterr().out
    local = build_local(specs, dec, progress=False)
    loaded = charts.load(out)
    for chart in local:
        assert loaded[chart.spec.name].plan_ids == chart.plan_ids
        assert np.array_equal(loaded[chart.spec.name].plan_index, chart.plan_index)
    assert not spark.sparkContext._jsc.sc().isStopped()


def test_choose_and_choose_many_agree_on_awkward_ranges(tmp_path):
    from cqopt.charts.lookup import QueryChart
    spec = ChartSpec("q", "x", (Axis("sel.S", 0.1, 0.9, 4),))
    chart = QueryChart(spec, [type("P", (), {"id": str(i)})() for i in range(4)],
                       np.arange(4), np.zeros(4))
    values = np.round(np.linspace(0.1, 0.9, 801), 3)
    many = chart.choose_many({"sel.S": values}).cells[:, 0]
    one = [chart.choose({"sel.S": float(v)}).cell[0] for v in values]
    assert many.tolist() == one
    assert chart.choose({"sel.S": 0.7}).cell == (2,)  # (0.7 - 0.1) / 0.8 * 4 = 3 - ulp


@pytest.mark.parametrize("args, fragment", [
    (["--out", "q.xyz"], ".png, .svg or .pdf"),
    (["--out", "q.png", "--at", "rate.TCP=300"], "not an axis to slice"),
])
def test_show_rejects_bad_options(chart_dir, tmp_path, capsys, args, fragment):
    argv = ["show", "--charts", str(chart_dir), "--query", "Q2"]
    argv += [a if not a.startswith("q.") else str(tmp_path / a) for a in args]
    assert main(argv) == 2
    assert fragment in capsys.readouterr().err


@pytest.mark.parametrize("weights", ["0,0", "inf,1", "1"])
def test_bad_weights_are_errors_not_tracebacks(dec_toml, workload_toml, tmp_path, capsys, weights):
    assert main(["build", "--catalog", dec_toml, "--workload", workload_toml, "--out",
                 str(tmp_path / "x"), "--engine", "local", "--weights", weights]) == 2
    assert capsys.readouterr().err.startswith("cqopt: error: --weights")


def test_out_below_a_file_fails_before_any_work(dec_toml, workload_toml, tmp_path, capsys):
    (tmp_path / "afile").write_text("x")
    assert main(["build", "--catalog", dec_toml, "--workload", workload_toml, "--out",
                 str(tmp_path / "afile" / "sub"), "--engine", "local"]) == 2
    assert "is a file" in capsys.readouterr().err


def test_damaged_axes_in_a_manifest_are_reported(chart_dir, tmp_path):
    import shutil
    bad = tmp_path / "bad"
    shutil.copytree(chart_dir, bad)
    manifest = json.loads((bad / "manifest.json").read_text())
    manifest["queries"]["Q1"]["axes"][0]["hi"] = manifest["queries"]["Q1"]["axes"][0]["lo"]
    (bad / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ChartSetError, match="does not match its manifest_sha256"):
        charts.load(bad)
    # Re-signed (as a buggy writer would), the content is still checked.
    manifest["manifest_sha256"] = manifest_checksum(manifest)
    (bad / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ChartSetError, match="malformed.*lo < hi"):
        charts.load(bad)
    manifest["queries"] = []
    manifest["manifest_sha256"] = manifest_checksum(manifest)
    (bad / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ChartSetError, match="not a table"):
        charts.load(bad)


def test_fixed_selectivity_above_one_is_rejected(dec):
    q = parse_query("SELECT * FROM TCP, UDP WHERE TCP.src_host = UDP.dest_host WINDOW [1]", dec)
    with pytest.raises(WorkloadError, match=r"\[0, 1\]"):
        make_spec("q", "x", q, dec, {"fixed": {"jsel.TCP.UDP": 7}})


@pytest.mark.parametrize("model", ["om", "pipes"])
def test_kernel_blocks_do_not_change_the_result(monkeypatch, dec_catalog, model):
    """The kernel costs a batch in blocks (under the allocator's mmap threshold); the
    block size must not change a single plan index or cost bit."""
    from cqopt.charts import kernel

    spec = ChartSpec("q1", "SELECT TCP.src_host, TCP.dest_host FROM TCP "
                     "WHERE TCP.dest_host = 2 WINDOW [1]",
                     (Axis("sel.TCP", 0, 1, 23), Axis("rate.TCP", 10, 5000, 11)), model=model)
    context = ChartContext(spec, dec_catalog)
    cells = np.arange(spec.n_cells)
    whole_plan, whole_cost = kernel.evaluate_cells(context, cells)
    monkeypatch.setattr(kernel, "BLOCK_CELLS", 7)
    plan, cost = kernel.evaluate_cells(context, cells)
    assert plan.dtype == np.uint16 and np.array_equal(plan, whole_plan)
    assert cost.tobytes() == whole_cost.tobytes()
    if model == "om":  # OM's chart has two regions whose border the blocks cut across
        assert len(np.unique(plan)) > 1
