"""The Python API a user meets: one import name, mappings, reprs, and errors that say what to do."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import venv
from pathlib import Path
from collections.abc import Mapping

import numpy as np
import pytest

import cqopt
from cqopt.charts.build import build_local
from cqopt.charts.spec import workload_specs
from cqopt.charts.store import ChartSetError, write_chart_set
from cqopt.charts.workload import load_workload
from cqopt.runtime.adaptive import AdaptiveQuery


@pytest.fixture(scope="module")
def chart_set(tmp_path_factory, examples, dec_catalog):
    specs = [s for s, _ in workload_specs(load_workload(examples / "workload.toml"),
                                          dec_catalog, {"k": 4})]
    out = tmp_path_factory.mktemp("api") / "charts"
    write_chart_set(out, build_local(specs, dec_catalog, progress=False), dec_catalog)
    return cqopt.load(out)


def test_chart_set_is_a_read_only_mapping(chart_set):
    assert isinstance(chart_set, Mapping)
    assert "Q1" in chart_set and "Q9" not in chart_set
    assert list(chart_set) == ["Q1", "Q2"] and len(chart_set) == 2
    assert dict(chart_set.items())["Q2"] is chart_set["Q2"]
    with pytest.raises(TypeError):
        chart_set["Q3"] = chart_set["Q1"]  # read-only: no __setitem__


def test_unknown_query_is_a_key_error_with_a_suggestion(chart_set):
    with pytest.raises(KeyError) as err:
        chart_set["q1"]
    assert isinstance(err.value, cqopt.CqoptError)
    assert "did you mean 'Q1'" in str(err.value) and not str(err.value).startswith('"')
    assert chart_set.get("Q9") is None  # Mapping.get works because it is a KeyError


def test_reprs_say_what_a_thing_is(chart_set):
    assert repr(chart_set).startswith("<ChartSet ") and "Q1 (16 cells)" in repr(chart_set)
    q1 = repr(chart_set["Q1"])
    assert "sel.TCP[0, 1]/4 x rate.TCP[100, 1000]/4" in q1 and "16 cells" in q1
    choice = chart_set.choose("Q1", {"sel.TCP": 0.1, "rate.TCP": 5000.0})
    assert repr(choice) == f"Choice(plan_id={choice.plan_id!r}, cell=(0, 3), " \
                           "clamped=('rate.TCP',))"
    assert repr(choice.plan).startswith(f"<Plan {choice.plan_id}: ")


def test_check_takes_a_catalog_or_its_path(chart_set, examples, dec_catalog):
    assert not chart_set.check(dec_catalog).stale
    assert not chart_set.check(examples / "dec-pkt.toml").stale
    assert chart_set.check(str(examples / "epa-http.toml")).stale
    with pytest.raises(ChartSetError, match="needs a Catalog or the path"):
        chart_set.check(42)


def test_missing_statistic_suggests_from_the_given_side(chart_set):
    """``sel.tcp`` given, ``sel.TCP`` needed: the hint names what the user typed."""
    with pytest.raises(ChartSetError) as err:
        chart_set.choose("Q1", {"sel.tcp": 0.1, "rate.TCP": 400.0})
    message = str(err.value)
    assert "statistic sel.TCP is missing" in message
    assert "was 'sel.tcp' meant to be 'sel.TCP'?" in message
    assert "did you mean 'sel.tcp'" not in message


def test_adaptive_query_takes_a_chart_set_and_a_name(chart_set):
    by_name = AdaptiveQuery(chart_set, "Q1", estimator="last")
    by_chart = AdaptiveQuery(chart_set["Q1"], estimator="last")
    rounds = [{"sel.TCP": s, "rate.TCP": r} for s, r in zip(np.linspace(0.05, 0.9, 6),
                                                           np.linspace(150, 950, 6))]
    assert [by_name.step(x).plan_id for x in rounds] == [by_chart.step(x).plan_id for x in rounds]


def test_one_default_estimator_the_round_s_own_statistics(chart_set):
    """AdaptiveQuery, replay(), cqopt.fidelity and the CLI default to one estimator, under
    which a step runs the plan charts.choose gives at the same statistics."""
    import inspect

    from cqopt.cli.main import build_parser
    from cqopt.replay.replay import replay
    from cqopt.runtime.estimators import DEFAULT_ESTIMATOR

    assert DEFAULT_ESTIMATOR == "sample"
    for function in (AdaptiveQuery.__init__, replay):
        assert inspect.signature(function).parameters["estimator"].default == DEFAULT_ESTIMATOR
    parser = build_parser()
    given = ["--catalog", "c", "--workload", "w", "--out", "o", "--charts", "x"]
    for argv in (["fidelity", *given], ["run", *given, "--query", "Q1", "--source", "T=t"]):
        assert parser.parse_args(argv).estimator == DEFAULT_ESTIMATOR
    query = AdaptiveQuery(chart_set, "Q1")
    rounds = [{"sel.TCP": s, "rate.TCP": r} for s, r in zip(np.linspace(0.05, 0.9, 8),
                                                           np.linspace(950, 150, 8))]
    stepped = [query.step(x).plan_id for x in rounds]
    assert stepped == [chart_set.choose("Q1", x).plan_id for x in rounds]
    assert len(set(stepped)) > 1  # the statistics cross a region boundary
    assert query.step({"sel.TCP": 0.12, "rate.TCP": 610.0}).estimate == {
        "sel.TCP": 0.12, "rate.TCP": 610.0}
    with pytest.raises(cqopt.CqoptError, match="expected 'sample' .* or one of 'decay'"):
        AdaptiveQuery(chart_set, "Q1", estimator="sample:0.1")


def test_the_api_says_what_it_does_unless_asked_not_to(examples, tmp_path, capsys):
    """build, generate and fidelity speak by default, in the console's words, and
    progress=False silences them."""
    import inspect

    for function in (cqopt.build, cqopt.generate, cqopt.fidelity):
        assert inspect.signature(function).parameters["progress"].default is True
    cqopt.generate(examples / "dec-pkt.toml", tmp_path / "t1", streams=["TCP"], duration=5)
    said = capsys.readouterr().err
    assert said.startswith("TCP: ") and " tuples over 5 s -> " in said
    cqopt.generate(examples / "dec-pkt.toml", tmp_path / "t2", streams=["TCP"], duration=5,
                   progress=False)
    assert capsys.readouterr().err == ""
    cqopt.build(examples / "dec-pkt.toml", examples / "workload.toml", tmp_path / "charts")
    assert "  Q2: 1,000 of 1,000 cells costed" in capsys.readouterr().err


@pytest.mark.parametrize("args, match", [
    ((), "needs the query's name with a chart set"),
    (("Q1", "extra"), None),
])
def test_adaptive_query_says_what_it_wants(chart_set, args, match):
    if match is None:
        with pytest.raises(TypeError):
            AdaptiveQuery(chart_set, *args)
    else:
        with pytest.raises(cqopt.CqoptError, match=match):
            AdaptiveQuery(chart_set, *args)
    with pytest.raises(cqopt.CqoptError, match="but a single chart"):
        AdaptiveQuery(chart_set["Q1"], "Q1")
    with pytest.raises(cqopt.CqoptError, match="needs a QueryChart .* got str"):
        AdaptiveQuery("out/charts")


def test_import_cqopt_loads_no_spark_pandas_or_matplotlib():
    code = ("import sys, cqopt; cqopt.load; cqopt.AdaptiveQuery; "
            "print(sorted(m for m in ('pyspark', 'pandas', 'matplotlib') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd="/")
    assert out.stdout.strip() == "[]"


def test_version_on_the_command_line_and_in_python():
    out = subprocess.run([sys.executable, "-m", "cqopt", "--version"], capture_output=True,
                         text=True, check=True, cwd="/")
    assert out.stdout.strip() == f"cqopt {cqopt.__version__}"
    assert cqopt.__version__ not in ("", "0+unknown")


@pytest.mark.slow
def test_the_wheel_installs_one_import_name(tmp_path, repo_root):
    """Built and installed into a fresh environment, cqopt adds only ``cqopt`` to it."""
    wheels = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps",
                    "-q", "-w", str(wheels), str(repo_root)], check=True, capture_output=True)
    (wheel,) = wheels.glob("cqopt-*.whl")
    env = tmp_path / "env"
    # The fresh environment sees this one's packages (numpy, pyspark, ...) but not cqopt's source.
    venv.create(env, system_site_packages=False, with_pip=True)
    python = env / "bin" / "python"
    site = subprocess.run([sys.executable, "-c", "import numpy, os; "
                           "print(os.path.dirname(os.path.dirname(numpy.__file__)))"],
                          capture_output=True, text=True, check=True).stdout.strip()
    subprocess.run([str(python), "-m", "pip", "install", "--no-deps", "-q", str(wheel)],
                   check=True, capture_output=True)
    installed = subprocess.run(
        [str(python), "-c", "import importlib.metadata as m; "
         "print(sorted({f.parts[0] for f in m.distribution('cqopt').files "
         "if not f.parts[0].endswith(('.dist-info', '.data')) and f.parts[0] != '..'}))"],
        capture_output=True, text=True, check=True, cwd=str(tmp_path)).stdout.strip()
    assert installed == "['cqopt']"
    typed = subprocess.run([str(python), "-c", "import importlib.metadata as m; print(any("
                            "f.name == 'py.typed' for f in m.distribution('cqopt').files))"],
                           capture_output=True, text=True, check=True, cwd=str(tmp_path))
    assert typed.stdout.strip() == "True"  # PEP 561: type checkers read cqopt's hints
    probe = ("import sys; sys.path.append(sys.argv[1]); import cqopt, cqopt.charts, "
             "cqopt.spark.session; print(cqopt.__version__, cqopt.charts.__file__.startswith("
             "sys.prefix)); import catalog")
    run = subprocess.run([str(python), "-c", probe, site], capture_output=True, text=True,
                         cwd=str(tmp_path))
    assert run.stdout.split() == [cqopt.__version__, "True"]
    assert "No module named 'catalog'" in run.stderr


def _base_requirements(wheel: Path) -> set[str]:
    """The distribution names a wheel requires without any extra."""
    import re
    import zipfile

    with zipfile.ZipFile(wheel) as archive:
        meta = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        lines = archive.read(meta).decode().splitlines()
    return {re.split(r"[<>=!~ ;\[]", line.partition(": ")[2], maxsplit=1)[0].lower()
            for line in lines if line.startswith("Requires-Dist:") and "extra ==" not in line}


def _expose(distributions: set[str], into: Path) -> None:
    """Link the installed files of ``distributions`` (and what they require) into ``into``."""
    from importlib import metadata

    seen, todo = set(), list(distributions)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        dist = metadata.distribution(name)
        for part in {f.parts[0] for f in dist.files or () if f.parts[0] != ".."}:
            source = Path(dist.locate_file(part))
            if source.exists() and not (into / part).exists():
                (into / part).symlink_to(source)
        todo += [r.split(";")[0].split("[")[0].strip().split(" ")[0].rstrip("<>=!~0123456789.,")
                 for r in dist.requires or () if "extra ==" not in r]


@pytest.mark.slow
def test_the_base_install_loads_looks_up_and_steps_without_spark_or_matplotlib(
        tmp_path, repo_root, examples):
    """A service that only looks plans up installs numpy, pyarrow, networkx and sqlglot."""
    from cqopt.cli.main import main

    charts = tmp_path / "charts"
    assert main(["build", "--catalog", str(examples / "dec-pkt.toml"), "--workload",
                 str(examples / "workload.toml"), "--out", str(charts), "--engine", "local",
                 "--k", "4"]) == 0
    wheels = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(wheels),
                    str(repo_root)], check=True, capture_output=True)
    (wheel,) = wheels.glob("cqopt-*.whl")
    base = _base_requirements(wheel)
    assert base == {"numpy", "pyarrow", "networkx", "sqlglot"}
    env = tmp_path / "env"
    venv.create(env, with_pip=True)
    python = env / "bin" / "python"
    subprocess.run([str(python), "-m", "pip", "install", "--no-deps", "-q", str(wheel)],
                   check=True, capture_output=True)
    # The base requirements, and nothing else, from this environment (no download).
    shelf = tmp_path / "base-packages"
    shelf.mkdir()
    _expose(base, shelf)
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()"
                           "['purelib'])"], capture_output=True, text=True, check=True)
    (Path(site.stdout.strip()) / "base-packages.pth").write_text(f"{shelf}\n")
    probe = textwrap.dedent(f"""
        import importlib.util, json, cqopt
        missing = [m for m in ("pyspark", "pandas", "matplotlib", "scipy")
                   if importlib.util.find_spec(m) is None]
        charts = cqopt.load({str(charts)!r})
        choice = charts.choose("Q1", {{"sel.TCP": 0.1, "rate.TCP": 450.0}})
        query = cqopt.AdaptiveQuery(charts, "Q1")
        outcome = query.step({{"sel.TCP": 0.12, "rate.TCP": 610.0}})
        print(json.dumps([missing, choice.plan_id, outcome.plan_id]))
    """)
    run = subprocess.run([str(python), "-c", probe], capture_output=True, text=True,
                         cwd=str(tmp_path))
    assert run.returncode == 0, run.stderr
    missing, plan_id, stepped = json.loads(run.stdout)
    assert missing == ["pyspark", "pandas", "matplotlib", "scipy"]
    here = cqopt.load(charts)
    assert plan_id == here.choose("Q1", {"sel.TCP": 0.1, "rate.TCP": 450.0}).plan_id
    assert stepped in here["Q1"].plan_ids
    explain = subprocess.run([str(env / "bin" / "cqopt"), "explain", "--catalog",
                              str(examples / "dec-pkt.toml"), "--workload",
                              str(examples / "workload.toml"), "--query", "Q2"],
                             capture_output=True, text=True, cwd=str(tmp_path))
    assert explain.returncode == 0, explain.stderr
    # A command that needs an extra says which, in one line, instead of a traceback.
    # Small charts build in this process, which the base install can do.
    build = subprocess.run([str(env / "bin" / "cqopt"), "build", "--catalog",
                            str(examples / "dec-pkt.toml"), "--workload",
                            str(examples / "workload.toml"), "--out", str(tmp_path / "c1")],
                           capture_output=True, text=True, cwd=str(tmp_path))
    assert build.returncode == 0, build.stderr
    assert "building in this process" in build.stderr
    build = subprocess.run([str(env / "bin" / "cqopt"), "build", "--catalog",
                            str(examples / "dec-pkt.toml"), "--workload",
                            str(examples / "workload.toml"), "--out", str(tmp_path / "c2"),
                            "--engine", "spark"],
                           capture_output=True, text=True, cwd=str(tmp_path))
    assert build.returncode == 2
    assert build.stderr.startswith("cqopt: error:") and "cqopt[spark]" in build.stderr
    assert len(build.stderr.strip().splitlines()) == 1


# -- the pipelines' face: cqopt.api, FidelityOptions, and the command line calling them --------
def test_every_pipeline_is_a_function_of_cqopt_api_and_the_root():
    """cqopt.api is a package of one module per pipeline; its names (and the root's lazy
    ones) are the functions, never a module of the same name."""
    import inspect

    import cqopt.api

    for name in ("build", "generate", "fidelity", "run", "run_workload", "explain", "choose",
                 "show", "calibrate"):
        function = getattr(cqopt.api, name)
        assert inspect.isfunction(function), name
        assert getattr(cqopt, name) is function and name in cqopt.__all__
        assert function.__doc__ and "Parameters\n    ----------" in function.__doc__, name
    assert cqopt.FidelityOptions is cqopt.api.FidelityOptions
    assert {n for n in cqopt.api.__all__} <= set(dir(cqopt.api))


@pytest.mark.parametrize("settings, message", [
    ({"k": 0}, "k = 0: must be a whole number >= 1"),
    ({"k_sweep": [2, 0]}, "k_sweep = '2,0': k = 0: must be a whole number >= 1"),
    ({"k_sweep": 5}, "k_sweep = 5: expected a list of whole numbers >= 1"),
    ({"rounds": 0}, "rounds = 0: needs a number >= 1"),
    ({"rounds": "3"}, "rounds = '3': needs a number >= 1"),
    ({"deadline": 0}, "deadline = 0: needs a number of seconds > 0"),
    ({"deadline": True}, "deadline = True: expected a number"),
    ({"min_kept": 2}, "min_kept = 2: needs a share in [0, 1]"),
    ({"delta": 1.5}, "delta = 1.5: needs a probability in (0, 1)"),
    ({"memory_budget": -1}, "memory_budget = -1: needs a size in bytes > 0"),
    ({"memory_budget": 1e6, "window_min": 0}, "window_min = 0: needs a share in (0, 1]"),
    ({"negotiate": True}, "negotiate: the queries negotiate to share a deadline; give the "
                          "deadline too"),
    ({"queries": "Q1"}, "query = 'Q1': expected a list of the workload's query names"),
    ({"replay_options": {"estimater": "decay"}},
     "replay_options = 'estimater': not a setting of a replay; did you mean 'estimator'?"),
    ({"master": ""}, "master = '': expected a Spark master URL"),
])
def test_fidelity_options_refuse_a_bad_value_when_made_in_one_line(settings, message):
    import dataclasses

    from cqopt.api import FidelityOptions

    with pytest.raises(cqopt.CqoptError) as err:
        FidelityOptions(**settings)
    assert str(err.value).startswith(message) and "\n" not in str(err.value)
    # the command line's names, through the same judge
    with pytest.raises(cqopt.CqoptError) as err:
        FidelityOptions(**settings, name=lambda key, value: f"--{key.replace('_', '-')} "
                                                           f"{value}")
    assert str(err.value).startswith("--")
    # made from a good one, the bad value is judged the same way
    with pytest.raises(cqopt.CqoptError, match="^" + message.split(":")[0]):
        dataclasses.replace(FidelityOptions(), **settings)


def test_every_shedder_promises_its_error_at_one_default_confidence():
    """The replay, the live run's shedders, the settings and the formulas take one δ when
    none is given, Babcock et al.'s 0.01: a replay judges the run it predicts."""
    import inspect

    from cqopt.charts.overload_settings import DELTA, OverloadSettings
    from cqopt.replay.overload import deadline_replay
    from cqopt.runtime.overload.shedding import error_constant
    from cqopt.runtime.overload.simulate import simulate_rounds

    defaults = {f.__name__: inspect.signature(f).parameters["delta"].default
                for f in (deadline_replay, error_constant, simulate_rounds)}
    assert DELTA == 0.01 and set(defaults.values()) == {DELTA}, defaults
    assert OverloadSettings().delta == DELTA


def test_fidelity_options_hold_their_values_judged():
    from cqopt.api import FidelityOptions
    from cqopt.runtime.estimators import DEFAULT_ESTIMATOR

    options = FidelityOptions(k_sweep=[2, 5], deadline=1, min_kept=0.5, queries=["Q1"],
                              replay_options={"seed": 3})
    assert options.k_sweep == (2, 5) and options.queries == ("Q1",)
    assert options.deadline == 1.0 and isinstance(options.deadline, float)
    assert options.delta is None and options.replay_delta == 0.01  # not given: the default
    assert dict(options.replay_options) == {"estimator": DEFAULT_ESTIMATOR, "seed": 3}
    with pytest.raises(TypeError):
        options.replay_options["seed"] = 4  # read-only: what was judged stays judged
    assert FidelityOptions(k=3) == FidelityOptions(k=3, name=lambda key, value: key)


def test_fidelity_takes_options_or_keywords_never_both(dec_toml, workload_toml, tmp_path):
    """The README's keywords still work (gathered into FidelityOptions, judged the same way);
    options= with a keyword, or a keyword that is no setting, is refused before any work."""
    from cqopt.api import FidelityOptions

    out = tmp_path / "report"
    given = {"trace_dir": tmp_path, "progress": False}
    with pytest.raises(cqopt.CqoptError) as by_keyword:
        cqopt.fidelity(dec_toml, workload_toml, out, k_sweep=[2, 0], **given)
    with pytest.raises(cqopt.CqoptError) as by_options:
        cqopt.fidelity(dec_toml, workload_toml, out,
                       options=FidelityOptions(k_sweep=[2, 0]), **given)
    assert str(by_keyword.value) == str(by_options.value)
    with pytest.raises(cqopt.CqoptError, match=r"^k = 3 is given beside options=, which holds "
                                               r"every setting: set k in the FidelityOptions"):
        cqopt.fidelity(dec_toml, workload_toml, out, options=FidelityOptions(k=3), k=3,
                       **given)
    with pytest.raises(cqopt.CqoptError, match=r"^dedline: not a setting of fidelity; did you "
                                               r"mean 'deadline'\?"):
        cqopt.fidelity(dec_toml, workload_toml, out, dedline=0.5, **given)
    with pytest.raises(cqopt.CqoptError, match="expected a FidelityOptions"):
        cqopt.fidelity(dec_toml, workload_toml, out, options={"k": 3}, **given)
    assert not out.exists()


@pytest.mark.parametrize("function, argv, expected", [
    ("explain", ["explain", "--catalog", "CATALOG", "--sql", "SELECT * FROM TCP WINDOW [1]",
                 "--stat", "rate.TCP=500", "--without", "pushdown"],
     {"sql": "SELECT * FROM TCP WINDOW [1]", "stats": {"rate.TCP": 500.0},
      "without": ["pushdown"], "model": None}),  # the API picks: the chart's, else om
    ("choose", ["choose", "--charts", "out/charts", "--query", "Q1", "--stat", "sel.TCP=0.3",
                "--catalog", "CATALOG", "--allow-stale"],
     {"charts": "out/charts", "query": "Q1", "stats": {"sel.TCP": 0.3}, "allow_stale": True}),
    ("show", ["show", "--charts", "out/charts", "--query", "Q2", "--plans", "--stat",
              "rate.SF=300"],
     {"charts": "out/charts", "query": "Q2", "at": {"rate.SF": 300.0}, "plans": True}),
    ("calibrate", ["calibrate", "--catalog", "CATALOG", "--out", "out/c.toml", "--rows",
                   "4000", "--sizes", "3"],
     {"out": "out/c.toml", "rows": 4000, "sizes": 3, "from_runs": None}),
])
def test_the_command_line_prints_what_its_api_function_returns(function, argv, expected,
                                                               dec_toml, monkeypatch, capsys):
    """explain, choose, show and calibrate do their work in cqopt.api; the command parses its
    options into the function's arguments and prints what it returns."""
    import inspect
    from pathlib import Path
    from types import SimpleNamespace

    import cqopt.api
    from cqopt.cli.main import main

    real = getattr(cqopt.api, function)
    calls = []

    def recorder(*args, **kwargs):
        bound = inspect.signature(real).bind(*args, **kwargs)
        calls.append(bound.arguments)
        return SimpleNamespace(text=lambda: f"{function} ran", to_dict=lambda: {}, plans=None,
                               path=Path("out/q2.png"), fitted=None, out=Path("out/c.toml"))

    monkeypatch.setattr(cqopt.api, function, recorder)
    assert main([dec_toml if a == "CATALOG" else a for a in argv]) == 0
    (given,) = calls
    assert {key: given.get(key) for key in expected} == expected
    assert given["name"]("stats" if function == "explain" else "query", "X").startswith("--")
    out = capsys.readouterr().out
    assert (f"{function} ran" in out) == (function != "show")
    assert ("wrote out/q2.png" in out) == (function == "show")
