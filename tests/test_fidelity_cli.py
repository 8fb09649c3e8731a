"""cqopt generate and cqopt fidelity, end to end on generated and real traces."""

from __future__ import annotations

import json

import pytest

from cqopt.cli.main import main


@pytest.fixture(scope="module")
def traces(dec_toml, tmp_path_factory):
    out = tmp_path_factory.mktemp("traces") / "dec"
    assert main(["generate", "--catalog", dec_toml, "--out", str(out), "--duration", "120",
                 "--seed", "4"]) == 0
    return out


def test_generate_writes_one_trace_per_stream(dec_toml, traces, capsys):
    assert sorted(p.name for p in traces.iterdir()) == [".cqopt", "SF.parquet", "TCP.parquet",
                                                        "UDP.parquet"]
    assert main(["generate", "--catalog", dec_toml, "--out", str(traces)]) == 2
    assert "--force" in capsys.readouterr().err
    assert main(["generate", "--catalog", dec_toml, "--out", str(traces.parent / "x"),
                 "--streams", "TCP,XYZ"]) == 2
    assert "no stream 'XYZ'" in capsys.readouterr().err


def test_fidelity_report_on_generated_traces(dec_toml, workload_toml, spark, traces, tmp_path,
                                             capsys):
    charts_dir = tmp_path / "charts"
    assert main(["build", "--catalog", dec_toml, "--workload", workload_toml,
                 "--out", str(charts_dir),
                 "--engine", "local", "--quiet"]) == 0
    capsys.readouterr()
    report = tmp_path / "report"
    assert main(["fidelity", "--catalog", dec_toml, "--workload", workload_toml, "--charts",
                 str(charts_dir), "--traces", str(traces), "--out", str(report),
                 "--k-sweep", "2,10", "--json", "--quiet"]) == 0
    table = json.loads(capsys.readouterr().out)["queries"]
    assert set(table) == {"Q1", "Q2"}
    q1 = table["Q1"]
    # 120 s of trace in 1-second rounds; the last, which the trace does not cover to its
    # end, is dropped
    assert q1["rounds"] == 119
    assert 0 <= q1["fidelity"] <= 1 and q1["switches"] <= q1["rounds"]
    assert set(q1["baselines"]) == {"rand", "rate", "best_static", "oracle_chart"}
    assert q1["verdict"]["unit"] == q1["unit"] == "the OM model's utility"
    # No plan fixed in hindsight does better than the per-round optimum, nor worse than RATE.
    assert 0 <= q1["headroom"] <= q1["baselines"]["rate"]["regret"]
    # Q1's selectivity drifts across its boundary in the generated data: the chart
    # beats the random plan.
    assert q1["fidelity"] > q1["baselines"]["rand"]["fidelity"]
    for name in ("report.md", "report.html", "summary.json", "rounds/Q1.parquet",
                 "figures/Q1-diagram.png", "figures/Q1-over-time.png",
                 "figures/Q2-k-sweep.png"):
        assert (report / name).exists(), name
    assert "| k | cells |" in (report / "report.md").read_text()


def test_fidelity_errors(dec_toml, workload_toml, traces, tmp_path, capsys):
    base = ["fidelity", "--catalog", dec_toml, "--workload", workload_toml, "--out",
            str(tmp_path / "r")]
    assert main(base) == 2
    assert "no trace given" in capsys.readouterr().err
    assert main([*base, "--trace", "NOPE=x.csv"]) == 2
    assert "no stream 'NOPE'" in capsys.readouterr().err
    assert main([*base, "--traces", str(traces), "--k-sweep", "2,x"]) == 2
    assert "whole numbers" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


def test_fidelity_on_the_epa_log(examples, shared_data, spark, tmp_path, capsys):
    EPA_LOG = shared_data / "epa-http" / "epa-http.parsed.csv"
    if not EPA_LOG.exists():
        pytest.skip(f"the EPA-HTTP trace is not at {EPA_LOG} (shared data absent)")
    args = ["fidelity", "--catalog", str(examples / "epa-http.toml"), "--workload",
            str(examples / "epa-workload.toml"), "--out", str(tmp_path / "epa"),
            "--k-sweep", "none", "--json", "--quiet"]
    for stream in ("HTTP", "REQ", "ERR"):
        args += ["--trace", f"{stream}={EPA_LOG}", "--ts-column",
                 f"{stream}=sec_since_0829_0000"]
    assert main(args) == 0
    table = json.loads(capsys.readouterr().out)["queries"]
    assert table["OK"]["rounds"] == 287  # 86,382 s of log: 287 whole five-minute rounds
    assert table["RETRY"]["fidelity"] > table["RETRY"]["baselines"]["rand"]["fidelity"]


def test_each_stream_its_own_arrival_series(dec_toml, tmp_path, capsys):
    gaps = tmp_path / "gaps.csv"  # 10 s at 100/s, then 10 s at 10/s
    gaps.write_text("interarrival_seconds\n" + "0.01\n" * 1000 + "0.1\n" * 100)
    out = tmp_path / "t"
    assert main(["generate", "--catalog", dec_toml, "--out", str(out), "--duration", "10",
                 "--streams", "TCP,UDP,SF", "--interarrivals", str(gaps),
                 "--rate-scale", "SF=3"]) == 0
    import pandas as pd
    counts = {s: len(pd.read_parquet(out / f"{s}.parquet")) for s in ("TCP", "UDP", "SF")}
    # TCP replays the first 10 s, UDP the next 10 s, SF the first again (cycled), at 3x.
    assert counts["TCP"] == pytest.approx(1000, abs=2)
    assert counts["UDP"] == pytest.approx(100, abs=2)
    assert counts["SF"] == pytest.approx(3 * (1000 + 100) * 10 / 20, rel=0.5)
    assert main(["generate", "--catalog", dec_toml, "--out", str(tmp_path / "u"),
                 "--rate-scale", "SF=-1"]) == 2
    assert "--rate-scale" in capsys.readouterr().err


def test_steady_join_keys(dec_toml, tmp_path, capsys):
    out = tmp_path / "t"
    assert main(["generate", "--catalog", dec_toml, "--out", str(out), "--duration", "60",
                 "--streams", "UDP", "--steady", "UDP.dest_host=1000", "--format", "csv"]) == 0
    import pandas as pd
    frame = pd.read_csv(out / "UDP.csv")
    assert frame.dest_host.between(1, 1000).all() and frame.dest_host.nunique() > 500
    assert frame.src_host.max() <= 50  # the others keep their skewed, drifting law
    assert main(["generate", "--catalog", dec_toml, "--out", str(tmp_path / "u"),
                 "--steady", "UDP.nope"]) == 2
    assert "STREAM.COLUMN" in capsys.readouterr().err


@pytest.mark.parametrize("option, value", [("--d", "0"), ("--k", "0"), ("--rounds", "0"),
                                           ("--decay", "-1")])
def test_fidelity_checks_options_before_any_work(dec_toml, workload_toml, traces, tmp_path,
                                                 capsys, option, value):
    assert main(["fidelity", "--catalog", dec_toml, "--workload", workload_toml,
                 "--traces", str(traces),
                 "--out", str(tmp_path / "r"), option, value]) == 2
    assert capsys.readouterr().err.startswith(f"cqopt: error: {option} ")


def test_fidelity_refuses_charts_of_another_query(dec_toml, workload_toml, traces, tmp_path,
                                                  capsys):
    other = tmp_path / "other.toml"
    other.write_text('[[query]]\nname = "Q1"\n'
                     'sql = "SELECT UDP.src_host FROM UDP WHERE UDP.src_port = 3 WINDOW [1]"\n')
    assert main(["build", "--catalog", dec_toml, "--workload", str(other), "--out",
                 str(tmp_path / "charts"), "--engine", "local", "--quiet"]) == 0
    capsys.readouterr()
    assert main(["fidelity", "--catalog", dec_toml, "--workload", workload_toml, "--charts",
                 str(tmp_path / "charts"), "--traces", str(traces), "--query", "Q1",
                 "--out", str(tmp_path / "r")]) == 2
    assert "is not the one in" in capsys.readouterr().err


def test_fidelity_replays_a_deadline_with_and_without_shedding(dec_toml, workload_toml, spark,
                                                               traces, tmp_path, capsys):
    """issue 22: --deadline predicts each chosen plan's seconds (engine model), sheds the
    rounds that overrun at their inputs and reports both runs; no overload, nothing shed."""
    import pandas as pd

    # A deadline the default engine model puts between Q1's quiet and busy rounds.
    report = tmp_path / "tight"
    assert main(["fidelity", "--catalog", dec_toml, "--workload", workload_toml, "--traces",
                 str(traces), "--out", str(report), "--k-sweep", "none", "--query", "Q1",
                 "--deadline", "0.3004", "--negotiate", "--json", "--quiet"]) == 0
    q1 = json.loads(capsys.readouterr().out)["queries"]["Q1"]
    summary, shared = q1["deadline"], q1["negotiation"]
    # alone on the engine, negotiating its QoS level is shedding by its (default) table
    assert shared["miss_share_without"] == summary["miss_share_without"]
    assert shared["miss_share_with"] <= summary["miss_share_with"] + 0.05
    assert summary["miss_share_without"] > 0.2 and summary["miss_share_with"] == 0.0
    assert summary["tuples_dropped"] > 0 and summary["engine_constants"] == "defaults"
    rounds = pd.read_parquet(report / "rounds" / "Q1.parquet")
    assert len(rounds) == summary["rounds"]
    page = (report / "report.md").read_text(encoding="utf-8")
    assert "A deadline of 0.3004 s per round" in page and "| with shedding |" in page
    # A deadline nothing overruns: nothing shed, every round keeps its whole input.
    assert main(["fidelity", "--catalog", dec_toml, "--workload", workload_toml, "--traces",
                 str(traces), "--out", str(tmp_path / "loose"), "--k-sweep", "none",
                 "--query", "Q1", "--deadline", "60", "--json", "--quiet"]) == 0
    loose = json.loads(capsys.readouterr().out)["queries"]["Q1"]["deadline"]
    assert loose["tuples_dropped"] == 0 and loose["shed_share"] == 0
    assert loose["miss_share_without"] == loose["miss_share_with"] == 0
    # The workload's own bound for Q1 applies when --deadline is not given.
    text = open(workload_toml, encoding="utf-8").read().replace(
        'name = "Q1"', 'name = "Q1"\ndeadline = 0.3004\nmin_kept = 0.5', 1)
    (tmp_path / "w.toml").write_text(text, encoding="utf-8")
    assert main(["fidelity", "--catalog", dec_toml, "--workload", str(tmp_path / "w.toml"),
                 "--traces", str(traces), "--out", str(tmp_path / "own"), "--k-sweep", "none",
                 "--json", "--quiet"]) == 0
    queries = json.loads(capsys.readouterr().out)["queries"]
    own = queries["Q1"]["deadline"]
    assert own["deadline_s"] == 0.3004 and own["min_kept"] == 0.5 and "deadline" not in queries["Q2"]


@pytest.mark.parametrize("args, fragment", [
    (["--negotiate"], "--negotiate: the queries negotiate to share a deadline"),
    (["--deadline", "0"], "--deadline '0': needs a number > 0"),
    (["--deadline", "-1"], "--deadline '-1': needs a number > 0"),
    (["--deadline", "1", "--min-kept", "1.5"], "--min-kept '1.5': needs a number <= 1"),
    (["--deadline", "1", "--delta", "0.7"], "--delta '0.7': needs a number <= 0.5"),
])
def test_bad_deadline_settings_are_refused_before_spark(dec_toml, workload_toml, traces,
                                                        tmp_path, capsys, args, fragment):
    assert main(["fidelity", "--catalog", dec_toml, "--workload", workload_toml, "--traces",
                 str(traces), "--out", str(tmp_path / "r"), *args]) == 2
    err = capsys.readouterr().err
    assert fragment in err and "starting Spark" not in err


def test_fidelity_holds_a_memory_budget_with_pipes_windows(dec_toml, workload_toml, spark,
                                                           traces, tmp_path, capsys):
    """issue 22: --memory-budget. Below the workload's peak, PIPES' resource manager
    shrinks every window in the rounds over it, and after that no round is over it."""
    def run(out: str, budget: str) -> dict:
        assert main(["fidelity", "--catalog", dec_toml, "--workload", workload_toml,
                     "--traces", str(traces), "--out", str(tmp_path / out), "--k-sweep", "none",
                     "--memory-budget", budget, "--json", "--quiet"]) == 0
        queries = json.loads(capsys.readouterr().out)["queries"]
        assert queries["Q1"]["memory"] == queries["Q2"]["memory"]  # one budget, shared
        return queries["Q1"]["memory"]

    roomy = run("roomy", "1t")
    assert roomy["over_budget_full"] == 0 and roomy["adapted_rounds"] == 0
    budget = 0.9 * roomy["peak_memory_full"]
    tight = run("tight", f"{budget:.0f}")
    assert tight["over_budget_full"] > 0 and tight["over_budget_after"] == 0
    assert tight["peak_memory_after"] <= budget * (1 + 1e-9)
    assert 0.25 <= tight["lowest_window_fraction"] < 1
    assert "A memory budget of" in (tmp_path / "tight" / "report.md").read_text(encoding="utf-8")
    assert main(["fidelity", "--catalog", dec_toml, "--workload", workload_toml, "--traces",
                 str(traces), "--out", str(tmp_path / "bad"), "--memory-budget", "lots"]) == 2
    assert "expected a size > 0 such as 100m" in capsys.readouterr().err
