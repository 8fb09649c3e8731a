"""The pipelines as Python functions: cqopt.build, cqopt.generate, cqopt.fidelity."""

from __future__ import annotations

import pytest

import cqopt
from cqopt.errors import CqoptError


def test_build_writes_a_chart_set_that_loads(dec_toml, workload_toml, tmp_path):
    built = cqopt.build(dec_toml, workload_toml, tmp_path / "charts", k=3, model="pipes")
    assert [c.spec.name for c in built] == ["Q1", "Q2"]
    loaded = cqopt.load(tmp_path / "charts")
    assert loaded["Q2"].spec.shape == (3, 3, 3) and loaded["Q1"].spec.model == "pipes"
    assert loaded.manifest["engine"] == "local"


def test_build_names_a_bad_parameter_as_python_spells_it(dec_toml, workload_toml, tmp_path):
    with pytest.raises(CqoptError, match=r"^k = 0: must be a whole number >= 1$"):
        cqopt.build(dec_toml, workload_toml, tmp_path / "charts", k=0)
    with pytest.raises(CqoptError, match=r"^engine = 'gpu': expected auto, local or spark$"):
        cqopt.build(dec_toml, workload_toml, engine="gpu")
    assert not (tmp_path / "charts").exists()


def test_generate_writes_seeded_traces(dec_toml, tmp_path):
    first = cqopt.generate(dec_toml, tmp_path / "a", streams=["UDP"], duration=5, seed=3,
                           steady=["UDP.dest_host=50"])
    second = cqopt.generate(dec_toml, tmp_path / "b", streams=["UDP"], duration=5, seed=3,
                            steady=["UDP.dest_host=50"])
    assert (first / "UDP.parquet").read_bytes() == (second / "UDP.parquet").read_bytes()
    with pytest.raises(CqoptError, match=r"^rate_scale = 'UDP=-1': expected STREAM=FACTOR"):
        cqopt.generate(dec_toml, tmp_path / "c", rate_scale={"UDP": -1})


def test_fidelity_replays_traces_into_a_report(spark, dec_toml, workload_toml, tmp_path):
    cqopt.generate(dec_toml, tmp_path / "traces", streams=["TCP"], duration=20)
    replays = cqopt.fidelity(dec_toml, workload_toml, tmp_path / "report",
                             trace_dir=tmp_path / "traces", k=3, k_sweep=[2])
    assert list(replays) == ["Q1"]  # Q2 lacks traces of UDP and SF
    assert 19 <= replays["Q1"].summary["rounds"] == len(replays["Q1"].rounds) <= 21
    assert (tmp_path / "report" / "report.html").exists()
    with pytest.raises(CqoptError, match=r"^k_sweep = '2,0': k = 0: must be a whole number"):
        cqopt.fidelity(dec_toml, workload_toml, tmp_path / "r2",
                       trace_dir=tmp_path / "traces", k_sweep=[2, 0])


def test_a_chart_built_from_observed_rounds_spans_their_percentiles(examples, tmp_path, capsys):
    """issue 20: charts that follow the data (build --ranges-from ROUNDS --percentiles)."""
    import numpy as np
    import pandas as pd

    import cqopt
    from cqopt.cli.main import main
    from cqopt.replay.rounds import write_round_statistics

    rounds = tmp_path / "rounds"
    rounds.mkdir()
    n = 200
    table = pd.DataFrame({"round": np.arange(n), "start": np.arange(n, dtype=float),
                          "rate.TCP": np.linspace(1500.0, 2500.0, n),  # beyond the catalog's
                          "sel.TCP": np.linspace(0.2, 0.4, n)})
    write_round_statistics(table, rounds / "Q1.parquet")
    assert main(["build", "--catalog", str(examples / "dec-pkt.toml"), "--workload",
                 str(examples / "workload.toml"), "--out", str(tmp_path / "cs"), "--engine",
                 "local", "--k", "4", "--ranges-from", str(rounds), "--percentiles",
                 "10,90"]) == 0
    err = capsys.readouterr().err
    axes = {a.statistic: (a.lo, a.hi) for a in cqopt.load(tmp_path / "cs")["Q1"].spec.axes}
    lo, hi = np.percentile(table["rate.TCP"], [10, 90])
    assert axes["rate.TCP"] == pytest.approx((lo, hi))
    assert axes["sel.TCP"] == pytest.approx(tuple(np.percentile(table["sel.TCP"], [10, 90])))
    assert "Q1: rate.TCP from" in err and "the 10th to 90th percentiles of 200 rounds" in err
    assert "Q2: no Q2.parquet" in err  # said, and Q2 keeps the workload's ranges
    assert main(["build", "--catalog", str(examples / "dec-pkt.toml"), "--workload",
                 str(examples / "workload.toml"), "--out", str(tmp_path / "cs2"), "--engine",
                 "local", "--ranges-from", str(tmp_path / "nowhere")]) == 2
    assert "not a folder" in capsys.readouterr().err


def test_a_chart_built_from_traces_spans_their_rounds_percentiles(spark, dec_toml,
                                                                  workload_toml, tmp_path,
                                                                  capsys):
    """issue 20: ``--ranges-from`` also takes the streams' traces (statistics on Spark)."""
    import numpy as np
    import pandas as pd

    # TCP: round r (1 s) holds 100 + 10 r tuples, a quarter of them to host 2 (Q1's selection);
    # one more at 20 s closes round 19 (a round counts once the trace reaches its end).
    ts, hosts = [], []
    for r in range(20):
        n = 100 + 10 * r
        ts += list(r + np.arange(n) / n)
        hosts += [2 if i % 4 == 0 else 7 for i in range(n)]
    ts, hosts = ts + [20.0], hosts + [7]
    traces = tmp_path / "traces"
    traces.mkdir()
    pd.DataFrame({"ts": ts, "src_host": 1, "dest_host": hosts, "src_port": 1, "dest_port": 1,
                  "bytes": 1}).to_csv(traces / "TCP.csv", index=False)
    charts = cqopt.build(dec_toml, workload_toml, k=3, ranges_from=traces,
                         percentiles=(0, 100), master=spark.sparkContext.master)
    err = capsys.readouterr().err
    axes = {a.statistic: (a.lo, a.hi) for a in charts[0].spec.axes}
    assert axes["rate.TCP"] == pytest.approx((100.0, 290.0))
    # every round's selectivity is 0.25 (rounded up per round): an axis around it
    assert axes["sel.TCP"][0] <= 0.25 <= axes["sel.TCP"][1] <= 0.3
    assert "Q1: rate.TCP from 100 to 290" in err and "the traces in" in err
    assert "Q2:" in err and "lacks a trace" in err  # UDP and SF have none: said
