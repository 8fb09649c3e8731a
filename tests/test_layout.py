"""The house: each package imports only the packages below it, and the heavy engines stay in
their rooms (pyspark in ``cqopt.spark``, matplotlib in the diagram and report modules)."""

from __future__ import annotations

import ast
import pkgutil
from pathlib import Path

import pytest

import cqopt

# Bottom to top; a package may import itself and any package before it.
# The optimizer's rooms are layers too: the query front end, then plans, then the rules.
# So are the rooms of the streaming run, above the rest of cqopt.spark, each importing
# only those before it, the loop that ties them and the package's face last.
# So are output's rooms, from the file written whole up to the directory switched in.
# A module's layer is its longest entry.
# The root package comes first: it imports nothing of cqopt (its names load lazily, by
# name), so a module no other entry covers lands there and any import of it runs upward.
LAYERS = ["cqopt", "cqopt.errors", "cqopt.progress", "cqopt.location",
          "cqopt.output.atomic", "cqopt.output.marker", "cqopt.output.checks",
          "cqopt.output.retire", "cqopt.output.recovery", "cqopt.output.switch",
          "cqopt.output.snapshot", "cqopt.output", "cqopt.owned_file",
          "cqopt.examples", "cqopt.catalog",
          "cqopt.optimizer.query", "cqopt.optimizer.plans", "cqopt.optimizer.rules",
          "cqopt.optimizer", "cqopt.costmodel", "cqopt.charts", "cqopt.runtime", "cqopt.replay",
          "cqopt.spark", "cqopt.spark.run.settings", "cqopt.spark.run.sources",
          "cqopt.spark.run.sink", "cqopt.spark.run.concurrent", "cqopt.spark.run.joint_job",
          "cqopt.spark.run.state",
          "cqopt.spark.run.staging",
          "cqopt.spark.run.files", "cqopt.spark.run.roundlog", "cqopt.spark.run.timeline",
          "cqopt.spark.run.report", "cqopt.spark.run.driver_rows",
          "cqopt.spark.run.shared_shedding", "cqopt.spark.run.overload", "cqopt.spark.run.observed",
          "cqopt.spark.run.rounds",
          "cqopt.spark.run.microbatch", "cqopt.spark.run.loop", "cqopt.spark.run.workload",
          "cqopt.spark.run", "cqopt.api", "cqopt.cli", "cqopt.__main__"]
ENGINES = {  # third-party package -> the only packages or modules that may import it
    "pyspark": ("cqopt.spark",),
    "py4j": ("cqopt.spark",),
    "matplotlib": ("cqopt.charts.diagram", "cqopt.replay.report", "cqopt.spark.run.timeline",
                   "cqopt.cli"),
}
NO_PANDAS = ("cqopt.runtime", "cqopt.charts.lookup", "cqopt.charts.store", "cqopt.charts.spec")


def _modules() -> dict[str, Path]:
    out = {"cqopt": Path(cqopt.__file__)}
    for info in pkgutil.walk_packages(cqopt.__path__, prefix="cqopt."):
        spec = info.module_finder.find_spec(info.name.rsplit(".", 1)[-1])
        out[info.name] = Path(spec.origin)
    return out


def _imports(path: Path, module: str | None = None) -> list[tuple[str, int]]:
    """Every import the module runs; those under ``if TYPE_CHECKING:`` never run. A relative
    import (``from ..spark import session``) is named absolutely, from ``module``'s name."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = (module or "").split(".") if path.name == "__init__.py" \
        else (module or "").split(".")[:-1]
    typing_only = {id(n) for block in ast.walk(tree) if isinstance(block, ast.If)
                   and getattr(block.test, "id", None) == "TYPE_CHECKING"
                   for stmt in block.body for n in ast.walk(stmt)}
    found = []
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            found += [(a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else []
            name = ".".join([*base, *([node.module] if node.module else [])])
            if node.module:
                found += [(name, node.lineno)]
            found += [(f"{name}.{a.name}", node.lineno) for a in node.names
                      if not node.module or name == "cqopt" or name in LAYERS]
    return found


def test_a_relative_import_is_checked_as_its_absolute_name(tmp_path):
    """``from .. import x`` names what it imports only relative to the module: the check
    reads it as the absolute import it is, so it cannot slip an upward import past."""
    (tmp_path / "mod.py").write_text("from ..spark import session\nfrom . import errors\n"
                                     "from .settings import X\n", encoding="utf-8")
    assert _imports(tmp_path / "mod.py", "cqopt.charts.mod") == [
        ("cqopt.spark", 1), ("cqopt.spark.session", 1), ("cqopt.charts.errors", 2),
        ("cqopt.charts.settings", 3)]
    (tmp_path / "__init__.py").write_text("from .build import y\n", encoding="utf-8")
    assert _imports(tmp_path / "__init__.py", "cqopt.charts") == [("cqopt.charts.build", 1)]


def _layer(module: str) -> int | None:
    found = [(len(top), i) for i, top in enumerate(LAYERS)
             if module == top or module.startswith(top + ".")]
    return max(found)[1] if found else None


MODULES = _modules()


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_import_runs_back_up(module):
    here = _layer(module)
    upward = []
    for name, line in _imports(MODULES[module], module):
        there = _layer(name)
        if there is not None and there > here:
            upward.append(f"line {line}: {name}")
    assert not upward, f"{module} imports upward: {upward}"


@pytest.mark.parametrize("module", sorted(MODULES))
def test_engines_stay_in_their_rooms(module):
    for name, line in _imports(MODULES[module], module):
        top = name.split(".")[0]
        if top in ENGINES:
            assert module.startswith(ENGINES[top]), f"{module} line {line} imports {name}"
        if top == "pandas":
            assert not module.startswith(NO_PANDAS), f"{module} line {line} imports pandas"


@pytest.mark.parametrize("module", sorted(MODULES))
def test_every_module_has_a_layer_of_its_own_room(module):
    """No module falls to the root's layer unnoticed: each is under an entry besides it."""
    assert module == "cqopt" or any(module == top or module.startswith(top + ".")
                                    for top in LAYERS[1:]), module


def test_every_folder_is_a_layer():
    packages = {m for m in MODULES if m.count(".") == 1 and MODULES[m].name == "__init__.py"}
    assert packages <= set(LAYERS), packages - set(LAYERS)
    rooms = {m for m in MODULES if m.startswith("cqopt.optimizer.")
             and MODULES[m].name == "__init__.py"}
    assert rooms <= set(LAYERS), rooms - set(LAYERS)
    # The streaming run: its package and every room of it.
    run = {m for m in MODULES if m == "cqopt.spark.run" or m.startswith("cqopt.spark.run.")}
    assert "cqopt.spark.run.loop" in run and run <= set(LAYERS), run - set(LAYERS)


@pytest.mark.parametrize("module", sorted(MODULES))
def test_examples_are_reached_through_the_package(module):
    """``__file__``-relative paths to examples/ exist only in a source tree, never when
    cqopt is installed; modules use :func:`cqopt.examples.example`."""
    source = MODULES[module].read_text(encoding="utf-8")
    assert not (module != "cqopt.examples" and "__file__" in source and "examples" in source)


def test_every_package_is_listed_for_the_wheel(repo_root):
    """setup.cfg lists packages one by one: a folder missing there is silently left out of
    the wheel, and the installed cqopt fails on its first import from it."""
    import configparser

    config = configparser.ConfigParser()
    config.read(repo_root / "setup.cfg", encoding="utf-8")
    listed = set(config["options"]["packages"].split())
    packages = {m for m in MODULES if MODULES[m].name == "__init__.py"}
    assert listed == packages, (packages - listed, listed - packages)
