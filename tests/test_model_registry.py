"""The cost-model seam: a model defined in one place plugs into charts, the CLI and checks."""

from __future__ import annotations

import re

import numpy as np
import pytest

import cqopt.charts as charts
from cqopt.charts.build import build_local
from cqopt.charts.spec import workload_specs
from cqopt.charts.store import write_chart_set
from cqopt.charts.workload import workload_from_dict
from cqopt.cli.main import main
from cqopt.costmodel import (
    MODELS,
    Constant,
    CostModel,
    CostModelError,
    OM,
    PIPES,
    make_model,
    model_entry,
    register_model,
    unregister_model,
)
from cqopt.costmodel.base import OperatorCost, PointCosting, plan_cost
from cqopt.optimizer.query.errors import WorkloadError

Q1 = "SELECT TCP.src_host FROM TCP WHERE TCP.dest_host = 2 WINDOW [1]"


class Toy(PointCosting):
    """A toy model: a plan that selects late is cheap at high selectivity only."""

    name = "toy"
    memory_units = ("bytes",)

    def __init__(self, catalog, memory_unit: str = "bytes"):
        self.catalog, self.memory_unit = catalog, memory_unit

    def constants(self) -> dict[str, Constant]:
        return {"weight": Constant(1.0, "this test")}

    def _cost(self, plan, stats, xp):
        rate = xp.value(stats["rate.TCP"])
        sel = xp.value(stats["sel.TCP"])
        late = plan.id.index("σ")  # 2 in TCP[σπ], 3 in TCP[πσ]
        memory = rate * (sel * late + (1.0 - sel) * (5 - late))
        return plan_cost(rate, {"root": OperatorCost(rate, memory, xp.full(rate, 0.0))}, xp)


@pytest.fixture
def dec(dec_catalog):
    return dec_catalog


@pytest.fixture
def toy():
    register_model(Toy)
    yield Toy
    unregister_model("toy")


def test_the_built_in_models_satisfy_the_protocol(dec):
    for name in ("om", "pipes"):
        model = make_model(name, dec)
        assert isinstance(model, CostModel)
        assert all(isinstance(c, Constant) and c.source for c in model.constants().values())
    assert make_model("om", dec).constants()["equi_join"].value == dec.operators.equi_join
    assert model_entry("pipes").memory_units == ("bytes",)
    assert model_entry("om").memory_units == ("bytes", "tuples")
    assert (MODELS["om"].factory, MODELS["pipes"].factory) == (OM, PIPES)


def test_a_model_reads_the_statistics_its_plans_name(dec):
    from cqopt.optimizer.query.logical import parse_query
    from cqopt.optimizer.rules.enumerate import enumerate_plans

    query = parse_query(Q1, dec)
    for plan in enumerate_plans(query):
        assert set(make_model("om", dec).statistics(plan)) == set(query.statistics)


def test_a_model_defined_in_a_test_builds_a_chart_that_loads_and_chooses(toy, dec, tmp_path):
    workload = workload_from_dict({"defaults": {"k": 4, "model": "toy"},
                                   "query": [{"name": "Q1", "sql": Q1}]})
    specs = [spec for spec, _ in workload_specs(workload, dec)]
    assert specs[0].model == "toy"
    write_chart_set(tmp_path / "charts", build_local(specs, dec, progress=False), dec)
    chart_set = charts.load(tmp_path / "charts")
    assert chart_set["Q1"].spec.model == "toy"
    # The toy's own preference, which OM does not share: σ late below sel 0.5, early above.
    assert chart_set.choose("Q1", {"sel.TCP": 0.2, "rate.TCP": 500}).plan_id == "TCP[πσ]"
    assert chart_set.choose("Q1", {"sel.TCP": 0.8, "rate.TCP": 500}).plan_id == "TCP[σπ]"
    om = [s for s, _ in workload_specs(workload, dec, {"model": "om"})]
    om_chart = build_local(om, dec, progress=False)[0]
    assert not np.array_equal(om_chart.plan_index,
                              build_local(specs, dec, progress=False)[0].plan_index)


def test_the_cli_builds_with_a_registered_model(toy, dec_toml, tmp_path, capsys):
    workload = tmp_path / "w.toml"
    workload.write_text(f'[[query]]\nname = "Q1"\nsql = "{Q1}"\n')
    out = tmp_path / "charts"
    assert main(["build", "--catalog", dec_toml, "--workload", str(workload), "--out",
                 str(out), "--engine", "local", "--model", "toy", "--k", "4", "--quiet"]) == 0
    assert charts.load(out).choose("Q1", {"sel.TCP": 0.2, "rate.TCP": 500}).plan_id \
        == "TCP[πσ]"


def test_unknown_model_names_list_the_registered_ones(dec):
    with pytest.raises(CostModelError, match=r"unknown cost model 'oms'; did you mean 'om'\? "
                                             r"\(the registered models are ") as refused:
        make_model("oms", dec)
    assert {"om", "pipes", "engine"} <= _registered(str(refused.value))
    with pytest.raises(WorkloadError, match="did you mean 'pipes'"):
        workload_from_dict({"defaults": {"model": "pipe"}, "query": [{"name": "a",
                                                                      "sql": "x"}]})


def test_unknown_cli_model_is_one_line_naming_the_choices(dec_toml, workload_toml, tmp_path,
                                                         capsys):
    assert main(["build", "--catalog", dec_toml, "--workload", workload_toml, "--out",
                 str(tmp_path / "x"), "--engine", "local", "--model", "oms"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("cqopt: error: ") and err.count("\n") == 1
    assert "did you mean 'om'" in err and {"om", "pipes"} <= _registered(err)
    assert main(["explain", "--catalog", dec_toml, "--sql", Q1, "--model", "pipe"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("cqopt: error: --model pipe: unknown cost model 'pipe'; did you mean "
                          "'pipes'? (the registered models are ") and err.endswith(")\n")
    assert {"om", "pipes", "engine"} <= _registered(err)


def _registered(message: str) -> set[str]:
    """The models a message lists as registered: the built-ins and any registered since."""
    return set(re.search(r"\(the registered models are ([^)]*)\)", message)[1].split(", "))


def test_a_model_name_is_registered_once(toy):
    with pytest.raises(CostModelError, match="registered already"):
        register_model(Toy)
    assert register_model(Toy, replace=True).factory is Toy


def test_a_model_names_the_unit_its_verdicts_are_in(toy):
    """The registry says what a model's cost counts: the verdicts' unit comes from there."""
    assert model_entry("toy").verdict_unit((0.4, 0.6)) == "the TOY model's utility"
    assert model_entry("om").defaults == "the paper's operator rates"
    engine = model_entry("engine")
    assert engine.verdict_unit((0.0, 0.0, 1.0)) == "predicted seconds (engine model)"
    # weighing its rate or memory too makes the engine's cost a utility, not seconds
    assert engine.verdict_unit((0.4, 0.6, 1.0)) == "the ENGINE model's utility"
    timed = register_model(Toy, name="toy-timed", unit="predicted toy seconds",
                           defaults="its toy constants")
    try:
        assert timed.verdict_unit((0.4, 0.6)) == "predicted toy seconds"
        assert timed.defaults == "its toy constants"
    finally:
        unregister_model("toy-timed")
