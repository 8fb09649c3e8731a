"""A crafted chart set whose manifest checksum is valid is still refused at load when a
value is out of its domain (a layout, model, weights or memory unit no build makes),
with one line naming the query and the field; never a KeyError on choose."""

from __future__ import annotations

import json
import shutil

import pytest

import cqopt.charts as charts
from cqopt.charts.store import MANIFEST_CHECKSUM, ChartSetError, manifest_checksum
from cqopt.cli.main import main


@pytest.fixture(scope="module")
def built(dec_toml, workload_toml, tmp_path_factory):
    out = tmp_path_factory.mktemp("crafted") / "charts"
    assert main(["build", "--catalog", dec_toml, "--workload", workload_toml, "--out", str(out),
                 "--engine", "local", "--k", "3", "--quiet"]) == 0
    return out


def _craft(built, tmp_path, **fields) -> str:
    """A copy of ``built`` whose query Q1 has ``fields``, its checksum made valid."""
    copy = tmp_path / "crafted"
    shutil.copytree(built, copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    manifest["queries"]["Q1"].update(fields)
    manifest[MANIFEST_CHECKSUM] = manifest_checksum(manifest)
    (copy / "manifest.json").write_text(json.dumps(manifest, allow_nan=True))
    return str(copy)


@pytest.mark.parametrize("field, value", [
    ("layout", "refined"),  # a grid's data under a refined chart's layout
    ("layout", "spiral"),
    ("model", "evil"),
    ("model", None),
    ("weights", [float("nan"), 0.6]),
    ("weights", [-0.4, 0.6]),
    ("weights", [float("inf"), 0.6]),
    ("weights", [0.0, 0.0]),
    ("weights", "heavy"),
    ("memory_unit", "parsecs"),
    ("plans", [{"id": "a"}, {"id": "a"}]),
])
def test_a_value_out_of_its_domain_is_refused_at_load_naming_the_field(built, tmp_path, capsys,
                                                                     field, value):
    crafted = _craft(built, tmp_path, **{field: value})
    with pytest.raises(ChartSetError, match=f"query Q1's manifest field '{field}'"):
        charts.load(crafted)
    assert main(["choose", "--charts", crafted, "--query", "Q1", "--stat", "sel.TCP=0.1",
                 "--stat", "rate.TCP=100"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("cqopt: error:") and f"'{field}'" in err


def test_a_refined_layout_with_its_shape_but_a_grids_data_is_refused(built, tmp_path):
    crafted = _craft(built, tmp_path, layout="refined", refine={"k0": [3, 3], "depth": 1})
    with pytest.raises(ChartSetError, match="no column level.*layout 'refined'"):
        charts.load(crafted)


def test_the_pipes_model_with_tuples_is_refused_by_the_models_own_rule(built, tmp_path):
    crafted = _craft(built, tmp_path, model="pipes", memory_unit="tuples")
    with pytest.raises(ChartSetError, match="field 'memory_unit'"):
        charts.load(crafted)
