"""Chart settings judged once: the same rule and words from a workload, the CLI and Python."""

from __future__ import annotations

import dataclasses
import json

import pytest

import cqopt.charts as charts
from cqopt.charts.build import build_local
from cqopt.charts.kernel import ChartContext
from cqopt.charts.settings import (
    ChartSettings,
    SettingsError,
    check_cells,
    judge_settings,
    max_cells,
)
from cqopt.charts.spec import Axis, ChartSpec, workload_specs
from cqopt.charts.store import ChartSetError, manifest_checksum, write_chart_set
from cqopt.charts.workload import workload_from_dict
from cqopt.cli.main import main
from cqopt.costmodel.utility import Utility
from cqopt.optimizer.query.errors import WorkloadError

Q1 = "SELECT TCP.src_host FROM TCP WHERE TCP.dest_host = 2 WINDOW [1]"


def build_args(dec_toml, workload_toml, tmp_path, *options):
    return ["build", "--catalog", dec_toml, "--workload", workload_toml, "--out",
            str(tmp_path / "cs"), "--engine", "local", "--quiet", *options]


@pytest.mark.parametrize("key, value, cli, problem", [
    ("k", 0, ["--k", "0"], "must be a whole number >= 1"),
    ("weights", [0, 0], ["--weights", "0,0"], "at least one weight > 0"),
    ("model", "oms", ["--model", "oms"], "unknown cost model 'oms'; did you mean 'om'?"),
    ("reduce", 1.5, ["--reduce", "1.5"], "must lie in [0, 1)"),
])
def test_one_rule_whether_from_the_workload_the_cli_or_python(
        key, value, cli, problem, dec_toml, workload_toml, tmp_path, capsys):
    with pytest.raises(SettingsError) as python:
        ChartSettings(**{key: value})
    assert str(python.value) == f"{key} = {value!r}: " + str(python.value).split(": ", 1)[1]
    rule = str(python.value).split(": ", 1)[1]
    assert problem in rule
    if key != "reduce":  # a build option only, not a workload key
        with pytest.raises(WorkloadError) as toml:
            workload_from_dict({"defaults": {key: value}, "query": [{"name": "a", "sql": "x"}]},
                               "w.toml")
        assert str(toml.value) == f"w.toml: defaults.{key} = {value!r}: {rule}"
    assert main(build_args(dec_toml, workload_toml, tmp_path, *cli)) == 2
    err = capsys.readouterr().err
    assert err == f"cqopt: error: {' '.join(cli)}: {rule}\n"


def test_a_chart_too_large_for_memory_is_refused_before_allocating(
        dec_toml, workload_toml, tmp_path, capsys):
    """issue 23 finding 5: ArrayMemoryError, and a ValueError traceback, before."""
    assert main(build_args(dec_toml, workload_toml, tmp_path, "--k", "1000000000")) == 2
    err = capsys.readouterr().err
    assert err.startswith("cqopt: error: ") and err.count("\n") == 1
    assert "--k 1000000000 on 2 axes makes 1e+18 cells" in err and "GiB of memory" in err
    assert main(build_args(dec_toml, workload_toml, tmp_path,
                           "--k", "99999999999999999999")) == 2
    err = capsys.readouterr().err
    assert err.startswith("cqopt: error: --k '99999999999999999999': the number is too "
                          "large") and err.count("\n") == 1
    assert not (tmp_path / "cs").exists()


def test_a_python_spec_too_large_is_refused_by_the_build(dec_catalog):
    k = int(max_cells() ** 0.5) + 1
    spec = ChartSpec("q", Q1, (Axis("sel.TCP", 0, 1, k), Axis("rate.TCP", 10, 1000, k)))
    with pytest.raises(SettingsError, match=f"query q: k = {k} on 2 axes makes"):
        build_local([spec], dec_catalog, progress=False)


def test_cells_of_unequal_axes_are_counted_exactly():
    assert check_cells("q", (3, 4, 5)) == 60
    with pytest.raises(SettingsError, match=r"a grid of 2 x \d+ makes"):
        check_cells("q", (2, max_cells()))


def test_settings_are_typed_and_normalised():
    settings = ChartSettings(k=4, weights=[1, 2], axes=["rate.S"], ranges={"rate.S": [1, 9]},
                             fixed={"sel.S": 1})
    assert settings.weights == (1.0, 2.0) and settings.axes == ("rate.S",)
    assert settings.ranges == {"rate.S": (1.0, 9.0)} and settings.fixed == {"sel.S": 1.0}
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.k = 5
    assert settings.replace(k=7, model=None).k == 7
    with pytest.raises(SettingsError, match="PIPES model counts memory in bytes only"):
        ChartSettings(model="pipes", memory_unit="tuples")
    with pytest.raises(SettingsError, match="depth = 2: only a refined chart has a depth"):
        ChartSettings(depth=2)
    with pytest.raises(SettingsError, match="did you mean 'k'"):
        judge_settings({"kk": 1})


def test_the_command_line_beats_the_workload_and_is_named_in_messages(dec_catalog):
    w = workload_from_dict({"defaults": {"k": 4, "weights": [1, 0]},
                            "query": [{"name": "a", "sql": Q1, "k": 5}]})
    (spec, _), = workload_specs(w, dec_catalog, {"k": 3, "model": "pipes"})
    assert spec.shape == (3, 3) and spec.model == "pipes" and spec.weights == (1.0, 0.0)
    with pytest.raises(WorkloadError, match=r"query a: --k 1000000 on 2 axes makes 1e\+12"):
        workload_specs(w, dec_catalog, {"k": 10**6}, {"k": "--k 1000000"})


def test_the_utility_is_made_once_per_chart(dec_catalog, monkeypatch):
    from cqopt.replay.replay import exact_utilities
    from cqopt.runtime.choice import chart_costing
    import pandas as pd

    made = []
    original = Utility.__post_init__
    monkeypatch.setattr(Utility, "__post_init__", lambda self: (made.append(self),
                                                                 original(self))[1])
    spec = ChartSpec("q", Q1, (Axis("sel.TCP", 0, 1, 3), Axis("rate.TCP", 10, 1000, 3)),
                     weights=(0.3, 0.7))
    context = ChartContext(spec, dec_catalog)
    chart = build_local([spec], dec_catalog, progress=False)[0]
    from cqopt.charts.lookup import QueryChart

    loaded = QueryChart(spec, context.plans, chart.plan_index, chart.cost)
    exact_utilities(loaded, dec_catalog, pd.DataFrame({"rate.TCP": [100.0],
                                                       "sel.TCP": [0.5]}))
    plan_costs, _, _ = chart_costing(loaded, dec_catalog)
    plan_costs({"rate.TCP": 100.0, "sel.TCP": 0.5})
    assert len(made) == 1 and context.utility is spec.utility


def test_a_manifest_is_judged_by_the_same_rules(dec_catalog, tmp_path):
    w = workload_from_dict({"defaults": {"k": 2}, "query": [{"name": "Q1", "sql": Q1}]})
    specs = [s for s, _ in workload_specs(w, dec_catalog)]
    out = write_chart_set(tmp_path / "cs", build_local(specs, dec_catalog, progress=False),
                          dec_catalog)
    assert charts.load(out)["Q1"].spec.utility == Utility(0.4, 0.6)
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["queries"]["Q1"]["model"] = "omm"
    manifest["manifest_sha256"] = manifest_checksum(manifest)
    (out / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ChartSetError, match="names cost model 'omm', which this cqopt does not "
                                            r"have \(the registered models are [^)]*\); "
                                            "did you mean 'om'") as refused:
        charts.load(out)
    listed = str(refused.value).split("the registered models are ")[1].split(")")[0]
    assert {"om", "pipes", "engine"} <= set(listed.split(", "))


def test_a_k_sweep_too_large_is_refused_before_any_work(dec_toml, workload_toml, tmp_path,
                                                        capsys):
    code = main(["fidelity", "--catalog", dec_toml, "--workload", workload_toml,
                 "--trace", "TCP=/nonexistent.parquet", "--out", str(tmp_path / "r"),
                 "--k-sweep", "2,0"])
    assert code == 2
    assert capsys.readouterr().err == ("cqopt: error: --k-sweep 2,0: k = 0: must be a whole "
                                       "number >= 1\n")


def _counting(monkeypatch, key: str) -> list:
    """The values the judge of ``key`` is called with, from now on."""
    import cqopt.charts.settings as settings

    seen, judge = [], settings.JUDGES[key]
    monkeypatch.setitem(settings.JUDGES, key, lambda value: seen.append(value) or judge(value))
    return seen


def test_one_build_judges_k_once(dec_toml, tmp_path, monkeypatch):
    """``cqopt build --k 2`` judges k at the command line's edge and carries the judged
    value to every query's chart: the same k, judged once (it was four times here)."""
    workload = tmp_path / "w.toml"
    workload.write_text(f'[[query]]\nname = "A"\nsql = "{Q1}"\n'
                        f'[[query]]\nname = "B"\nsql = "{Q1}"\n', encoding="utf-8")
    seen = _counting(monkeypatch, "k")
    assert main(build_args(dec_toml, str(workload), tmp_path, "--k", "2")) == 0
    assert seen == [2]
    assert [c.spec.shape for c in charts.load(tmp_path / "cs").values()] == [(2, 2), (2, 2)]


def test_a_build_judges_reduce_once_for_all_its_charts(dec_catalog, monkeypatch):
    specs = [s for s, _ in workload_specs(workload_from_dict({"query": [
        {"name": "A", "sql": Q1, "k": 3}, {"name": "B", "sql": Q1, "k": 2}]}), dec_catalog)]
    seen = _counting(monkeypatch, "reduce")
    built = build_local(specs, dec_catalog, progress=False, reduce=0.1)
    assert seen == [0.1] and [c.reduction["lambda"] for c in built] == [0.1, 0.1]


def test_judged_settings_are_still_checked_together():
    """Values judged one by one, merged, still meet the rules between settings."""
    judged = judge_settings({"model": "pipes", "memory_unit": "tuples"})
    with pytest.raises(SettingsError, match="PIPES model counts memory in bytes only"):
        ChartSettings.from_values(judged)
    assert ChartSettings.from_values(judge_settings({"k": 3})) == ChartSettings(k=3)
