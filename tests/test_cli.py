"""The cqopt command line, run as a user runs it."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cqopt.cli.main import main


def test_explain_workload_text(dec_toml, workload_toml, capsys):
    assert main(["explain", "--catalog", dec_toml, "--workload", workload_toml]) == 0
    out = capsys.readouterr().out
    assert "== Q1" in out and "== Q2" in out
    assert "TCP.dest_host = 2  [selection-equality]" in out
    assert "SF.dest_host = TCP.src_host  (implied)" in out
    assert "Statistics: rate.TCP, sel.TCP" in out


def test_explain_costs_a_workload_query_with_its_charts_model(dec_toml, tmp_path, capsys):
    """A workload that builds its charts with PIPES is explained with PIPES unless --model
    says otherwise: the CLI's default no longer overrides the workload's."""
    workload = tmp_path / "w.toml"
    workload.write_text('[defaults]\nmodel = "pipes"\n\n[[query]]\nname = "Q1"\nsql = '
                        '"SELECT TCP.src_host FROM TCP WHERE TCP.dest_host = 2 WINDOW [1]"\n')
    assert main(["explain", "--catalog", dec_toml, "--workload", str(workload)]) == 0
    assert "Costed with the PIPES model" in capsys.readouterr().out
    assert main(["explain", "--catalog", dec_toml, "--workload", str(workload),
                 "--model", "om"]) == 0
    assert "Costed with the OM model" in capsys.readouterr().out


def test_explain_json_one_query(dec_toml, workload_toml, capsys):
    assert main(["explain", "--catalog", dec_toml, "--workload", workload_toml, "--query", "Q1",
                 "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["name"] == "Q1"
    assert data["query"]["statistics"] == ["rate.TCP", "sel.TCP"]
    assert data["query"]["output_width"] == 8


def test_explain_sql(dec_toml, capsys):
    assert main(["explain", "--catalog", dec_toml, "--sql",
                 "SELECT COUNT(*) FROM UDP [RANGE 10 SECONDS] WHERE UDP.bytes > 100"]) == 0
    assert "COUNT(*)" in capsys.readouterr().out


@pytest.mark.parametrize("args, fragment", [
    (["--sql", "SELECT * FROM TPC WINDOW [1]"], "did you mean 'TCP'"),
    (["--sql", "SELECT FROM"], "syntax error"),
    (["--workload", "{workload}", "--query", "Q3"], "no query named 'Q3'"),
    (["--workload", "missing.toml"], "no such file"),
])
def test_errors_exit_2_without_traceback(dec_toml, workload_toml, capsys, args, fragment):
    args = [a.format(workload=workload_toml) for a in args]
    assert main(["explain", "--catalog", dec_toml, *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("cqopt: error:") and fragment in err
    assert "Traceback" not in err


def test_missing_catalog_file(capsys):
    assert main(["explain", "--catalog", "nope.toml", "--sql", "SELECT 1"]) == 2
    assert "nope.toml: no such file" in capsys.readouterr().err


def test_help_and_console_script(tmp_path):
    """The installed ``cqopt`` command (the environment's, beside its python), run away from
    the source tree."""
    command = shutil.which("cqopt", path=str(Path(sys.executable).parent))
    assert command is not None, f"no cqopt console script beside {sys.executable}"
    done = subprocess.run([command, "explain", "--help"], capture_output=True, text=True,
                          cwd=tmp_path)
    assert done.returncode == 0 and "--catalog" in done.stdout


def test_ci_runs_the_readme_test_command(repo_root):
    ci = (repo_root / ".ci" / "run").read_text().strip().splitlines()[-1]
    assert ci in (repo_root / "README.md").read_text()


def test_explain_costs_every_plan_and_marks_the_cheapest(dec_toml, workload_toml, capsys):
    assert main(["explain", "--catalog", dec_toml, "--workload", workload_toml, "--query", "Q1",
                 "--stat", "rate.TCP=500", "--stat", "sel.TCP=0.05", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [p["id"] for p in data["plans"]] == ["TCP[σπ]", "TCP[πσ]"]
    for plan in data["plans"]:
        assert set(plan["cost"]) == {"rate", "memory", "cpu", "utility"}
        assert plan["cost"]["rate"] == pytest.approx(25.0)
    cheapest = min(data["plans"], key=lambda p: p["cost"]["utility"])
    assert data["chosen"] == cheapest["id"] == "TCP[σπ]"  # low selectivity: select first
    assert data["statistics"]["sel.TCP"] == {"value": 0.05, "default": False,
                                             "source": "given"}


def test_explain_defaults_are_listed(dec_toml, workload_toml, capsys):
    assert main(["explain", "--catalog", dec_toml, "--workload", workload_toml, "--query", "Q2",
                 "--model", "pipes", "--weights", "0.5,0.5"]) == 0
    out = capsys.readouterr().out
    # A workload's query at its chart's statistics (jsel fixed at 0.001 there).
    assert "rate.TCP=550 (chart)" in out and "jsel.TCP.UDP=0.001 (chart)" in out
    assert out.count("<- cheapest") == 1 and "PIPES model" in out
    q2 = ("SELECT * FROM TCP, UDP WHERE TCP.src_host = UDP.dest_host WINDOW [1]")
    assert main(["explain", "--catalog", dec_toml, "--sql", q2]) == 0
    out = capsys.readouterr().out
    assert "rate.TCP=550 (default)" in out and "jsel.TCP.UDP=0.5 (default)" in out


@pytest.mark.parametrize("stat, fragment", [
    ("rate.XYZ=3", "no query here depends on it"),
    ("sel.TCP=2", "[0, 1]"),
    ("rate.TCP=-1", ">= 0"),
    ("rate.TCP", "NAME=VALUE"),
    ("bogus=1", "malformed statistic name"),
])
def test_explain_bad_stats(dec_toml, workload_toml, capsys, stat, fragment):
    assert main(["explain", "--catalog", dec_toml, "--workload", workload_toml,
                 "--stat", stat]) == 2
    assert fragment in capsys.readouterr().err


def test_explain_lets_memory_decide_when_no_plan_produces_output(dec_toml, capsys):
    # A contradiction passes nothing: every plan's output rate is 0, so OM's w_r / C_r
    # would tie all plans at infinity; the finite reading lets memory alone decide.
    sql = "SELECT TCP.src_host FROM TCP WHERE TCP.bytes > 5 AND TCP.bytes < 2 WINDOW [1]"
    assert main(["explain", "--catalog", dec_toml, "--sql", sql, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    costs = {p["id"]: p["cost"] for p in report["plans"]}
    assert all(c["rate"] == 0 for c in costs.values())
    assert report["chosen"] == min(costs, key=lambda pid: costs[pid]["memory"])


def test_one_name_per_concept_and_the_old_spellings_still_work(dec_toml, workload_toml,
                                                               tmp_path, capsys):
    """issue 21: --sql was the query in explain and a dialect in choose; --at in show was
    --stat elsewhere. The new names are listed; the old ones work, unlisted, for a release."""
    charts = str(tmp_path / "cs")
    assert main(["build", "--catalog", dec_toml, "--workload", workload_toml, "--out", charts,
                 "--engine", "local"]) == 0
    capsys.readouterr()
    stats = ["--stat", "sel.TCP=0.1", "--stat", "rate.TCP=450"]
    assert main(["choose", "--charts", charts, "--query", "Q1", *stats, "--sql-out",
                 "duckdb"]) == 0
    new = capsys.readouterr().out
    assert main(["choose", "--charts", charts, "--query", "Q1", *stats, "--sql", "duckdb"]) == 0
    old = capsys.readouterr()
    assert old.out == new and "SELECT" in new
    # The old spellings say, in one line, which spelling to use instead.
    assert old.err == ("cqopt: warning: --sql is the old spelling of --sql-out, which it does "
                       "the same as; it goes in a later release\n")
    assert main(["show", "--charts", charts, "--query", "Q2", "--out", str(tmp_path / "q.png"),
                 "--at", "rate.SF=300"]) == 0
    warnings = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
    assert warnings == ["cqopt: warning: --at is the old spelling of --stat, which it does the "
                        "same as; it goes in a later release"]
    for command, listed, hidden in (("choose", "--sql-out", "--sql "),
                                    ("show", "--stat", "--at")):
        try:
            main([command, "--help"])
        except SystemExit:
            pass
        text = capsys.readouterr().out
        assert listed in text and hidden not in text.replace("--sql-out", ""), command


def test_choose_refuses_charts_of_another_catalog_unless_allowed(dec_toml, workload_toml,
                                                                 tmp_path, capsys):
    """issue 21: a chart set from another catalog only warned and exited 0."""
    charts = str(tmp_path / "cs")
    assert main(["build", "--catalog", dec_toml, "--workload", workload_toml, "--out", charts,
                 "--engine", "local"]) == 0
    other = tmp_path / "other.toml"
    other.write_text(open(dec_toml).read().replace("equi_join = 3000", "equi_join = 9000"))
    capsys.readouterr()
    args = ["choose", "--charts", charts, "--query", "Q1", "--stat", "sel.TCP=0.1", "--stat",
            "rate.TCP=450", "--catalog", str(other)]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("cqopt: error: --charts ") and "--allow-stale" in err
    assert err.count("cqopt build --force") == 1 and err.count("rebuild") == 1, err
    assert main([*args, "--allow-stale"]) == 0
    warned = capsys.readouterr().err
    assert "warning" in warned and warned.count("cqopt build --force") == 1, warned


def test_explain_of_a_workload_costs_as_the_chart_does(dec_toml, workload_toml, capsys):
    """issue 21: explain --workload costed Q2 at jsel 0.5 where its chart fixes 0.001."""
    assert main(["explain", "--catalog", dec_toml, "--workload", workload_toml, "--query",
                 "Q2", "--json", "--stat", "rate.TCP=900"]) == 0
    found = json.loads(capsys.readouterr().out)
    stats = found["statistics"]
    assert stats["jsel.TCP.UDP"] == {"value": 0.001, "default": False, "source": "chart"}
    assert stats["rate.TCP"]["source"] == "given" and stats["rate.TCP"]["value"] == 900
    assert stats["rate.UDP"]["source"] == "chart"  # the middle of its axis
    assert found["model"] == "om" and found["weights"][:2] == [0.4, 0.6]


@pytest.mark.parametrize("stat, fragment", [
    ("Rate.tcp=5", "did you mean 'rate.tcp'?"),
    ("rate.tcp=5", "(the statistics are rate.TCP); did you mean 'rate.TCP'?"),
])
def test_a_misspelt_statistic_gets_a_suggestion(dec_toml, capsys, stat, fragment):
    """issue 21: 'Rate.tcp' was 'malformed' with no suggestion."""
    assert main(["explain", "--catalog", dec_toml, "--sql",
                 "SELECT TCP.src_host FROM TCP WINDOW [1]", "--stat", stat]) == 2
    assert fragment in capsys.readouterr().err


def test_explain_shows_each_operators_estimates_in_the_tree(dec_toml, workload_toml, capsys):
    """issue 21: per-operator estimates, as PostgreSQL's EXPLAIN puts them on each node."""
    assert main(["explain", "--catalog", dec_toml, "--workload", workload_toml, "--query", "Q2",
                 "--json"]) == 0
    obj = json.loads(capsys.readouterr().out)
    plan = obj["plans"][0]
    assert len(plan["operators"]) == 5  # three streams, two joins
    root = [line for line in plan["tree"].splitlines()][0]
    top = max(plan["operators"].values(), key=lambda op: op["memory"])
    assert f"memory {top['memory']:.4g} B" in plan["tree"] and "(rate " in root
    # the operators' cpu adds up to the plan's
    assert sum(op["cpu"] for op in plan["operators"].values()) == pytest.approx(
        plan["cost"]["cpu"])


def test_explain_analyze_prints_actual_rows_beside_the_estimates(dec_toml, workload_toml,
                                                                 tmp_path, capsys):
    """issue 21: ``explain --analyze`` runs the plans on one round of real tuples."""
    import pandas as pd

    import cqopt

    cqopt.generate(dec_toml, tmp_path / "traces", streams=["TCP", "UDP", "SF"], duration=6,
                   steady=["TCP.src_host=40", "UDP.dest_host=40", "SF.dest_host=40"])
    assert main(["explain", "--catalog", dec_toml, "--workload", workload_toml, "--query", "Q2",
                 "--analyze", str(tmp_path / "traces"), "--round", "2", "--json"]) == 0
    obj = json.loads(capsys.readouterr().out)
    frames = {s: pd.read_parquet(tmp_path / "traces" / f"{s}.parquet") for s in ("TCP", "UDP", "SF")}
    start = min(f["ts"].min() for f in frames.values())
    counts = {s: int(((f["ts"] >= start + 2) & (f["ts"] < start + 3)).sum())
              for s, f in frames.items()}
    # the round's rates are measured, and each stream operator emitted the round's tuples
    assert {s: obj["statistics"][f"rate.{s}"]["value"] for s in counts} == pytest.approx(counts)
    assert {v["source"] for v in obj["statistics"].values()} == {"round 2"}
    tcp, udp, sf = (frames[s][(frames[s]["ts"] >= start + 2) & (frames[s]["ts"] < start + 3)]
                    for s in ("TCP", "UDP", "SF"))
    result = len(tcp.merge(udp, left_on="src_host", right_on="dest_host")
                 .merge(sf, left_on="dest_host_y", right_on="dest_host"))
    for plan in obj["plans"]:
        ops = plan["operators"]
        streams = [op for key, op in ops.items() if op["cpu"] == 0]
        assert sorted(op["rows_actual"] for op in streams) == sorted(counts.values())
        assert max(op["rows_actual"] for op in ops.values()) == result  # the root's output
        assert "actual " in plan["tree"] and "rows estimated" in plan["tree"]
    for argv, fragment in (
            (["--round", "99"], "--round 99: the traces hold rounds 0 to"),
            (["--stat", "rate.TCP=5"], "--stat with --analyze"),):
        assert main(["explain", "--catalog", dec_toml, "--workload", workload_toml,
                     "--query", "Q2", "--analyze", str(tmp_path / "traces"), *argv]) == 2
        assert fragment in capsys.readouterr().err
    assert main(["explain", "--catalog", dec_toml, "--workload", workload_toml,
                 "--round", "1"]) == 2
    assert "a round of --analyze TRACES" in capsys.readouterr().err


@pytest.mark.parametrize("argv, module, install", [
    (["generate", "--catalog", "c.toml", "--out", "t"], "pandas", "cqopt[generate]"),
    (["generate", "--catalog", "c.toml", "--out", "t"], "scipy", "cqopt[generate]"),
    (["fidelity", "--catalog", "c.toml", "--workload", "w.toml", "--traces", "t", "--out", "r"],
     "pyspark", "cqopt[spark,report]"),
    (["fidelity", "--catalog", "c.toml", "--workload", "w.toml", "--traces", "t", "--out", "r"],
     "matplotlib", "cqopt[spark,report]"),
])
def test_a_missing_extra_names_every_extra_the_command_needs(argv, module, install, capsys,
                                                             monkeypatch):
    """One pip install is enough: fidelity asks for spark and report together, and generate
    for generate (not spark, though pandas is in both)."""
    import cqopt.api

    def missing(*args, **kwargs):
        raise ModuleNotFoundError(f"No module named {module!r}", name=module)

    monkeypatch.setattr(cqopt.api, argv[0], missing)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"cqopt: error: cqopt {argv[0]} needs the extra")
    assert f"pip install '{install}'" in err and len(err.strip().splitlines()) == 1


def test_quiet_silences_spark_s_start_in_fidelity(examples, tmp_path, monkeypatch, capsys):
    """--quiet reaches Spark's start-up too (its "still starting" lines), not only the steps."""
    import cqopt
    import cqopt.spark.session as session

    traces = tmp_path / "traces"
    cqopt.generate(examples / "dec-pkt.toml", traces, streams=["TCP"], duration=5,
                   progress=False)
    said = []

    def started(master, progress=True, **kwargs):
        said.append(progress)
        raise cqopt.CqoptError("stopped before Spark starts")

    monkeypatch.setattr(session, "running_session", started)
    argv = ["fidelity", "--catalog", str(examples / "dec-pkt.toml"), "--workload",
            str(examples / "workload.toml"), "--traces", str(traces), "--query", "Q1",
            "--k-sweep", "none"]
    assert main([*argv, "--out", str(tmp_path / "r1"), "--quiet"]) == 2
    assert main([*argv, "--out", str(tmp_path / "r2")]) == 2
    assert said[0] is False and callable(said[1])
    assert "stopped before Spark starts" in capsys.readouterr().err


@pytest.mark.parametrize("command", [
    ["generate", "--catalog", "c.toml", "--out", "t"],
    ["show", "--charts", "c", "--query", "Q1"],
])
def test_every_command_takes_quiet_and_an_unknown_option_points_to_its_help(command, capsys):
    from cqopt.cli.main import build_parser

    assert build_parser().parse_args([*command, "--quiet"]).quiet
    assert main([*command, "--no-such-option"]) == 2
    err = capsys.readouterr().err
    assert err == (f"cqopt: error: unrecognized arguments: --no-such-option (see cqopt "
                   f"{command[0]} --help)\n")
