"""The user's contract, third audit (continued): stray CQL tokens and absurd windows refused,
fidelity's options and trailing tuples said out loud, a refused round kept in the schedule."""

from __future__ import annotations

from pathlib import Path

import pytest

import cqopt
from cqopt.cli.main import main
from cqopt.errors import CqoptError
from cqopt.optimizer.query.dialect import parse
from cqopt.optimizer.query.errors import CQLSyntaxError, UnsupportedQueryError
from cqopt.optimizer.query.logical import parse_query


# -- CQL: stray tokens are an error where they stand ----------------------------------------
@pytest.mark.parametrize("sql, col, near", [
    ("SELECT * FROM TCP JOIN UDP [NOW] ? ON TCP.src_host = UDP.src_host", 34, "?"),
    ("SELECT * FROM TCP [NOW] ? WHERE TCP.src_host = 1", 25, "?"),
    ("SELECT TCP.src_host, , TCP.dest_host FROM TCP", 22, ","),
    ("SELECT TCP.src_host, FROM TCP", 22, "FROM"),
    ("SELECT * FROM TCP WHERE TCP.src_host IN (1, 2,, 3)", 47, ","),
    ("SELECT * FROM TCP WHERE TCP.src_host IN ( ,5)", 43, ","),
    ("SELECT * FROM TCP GROUP BY TCP.src_host, , TCP.dest_host", 42, ","),
    ("SELECT * FROM TCP * WHERE TCP.src_host = 1", 19, "*"),
    ("SELECT * ts FROM TCP", 10, "ts"),
    ("SELECT TCP.* AS t FROM TCP", 17, "t"),
    ("SELECT COUNT() FROM TCP", 14, ")"),
])
def test_a_stray_token_is_refused_at_its_position(sql, col, near):
    with pytest.raises(CQLSyntaxError) as info:
        parse(sql)
    error = info.value
    assert (error.line, error.col, error.token) == (1, col, near), str(error)
    assert "\n" not in str(error)


@pytest.mark.parametrize("sql, bound", [
    ("SELECT * FROM TCP [RANGE 1e297 SECONDS]", "1 year"),
    ("SELECT * FROM TCP [RANGE 18446744073709551616 SECONDS]", "1 year"),
    ("SELECT * FROM TCP [RANGE 8785 HOURS]", "1 year"),
    ("SELECT * FROM TCP WINDOW [1e-31]", "1 MILLISECONDS"),
    ("SELECT * FROM TCP [RANGE 0.5 MILLISECONDS]", "1 MILLISECONDS"),
    ("SELECT * FROM TCP [ROWS 9999999999999999999] WINDOW [1]", "2^31"),
    ("SELECT * FROM TCP [ROWS 2147483649] WINDOW [1]", "2^31"),
])
def test_an_absurd_window_is_refused_with_its_bound(dec_catalog, sql, bound):
    with pytest.raises((UnsupportedQueryError, CQLSyntaxError), match=bound.replace("^", r"\^")):
        parse_query(sql, dec_catalog)


@pytest.mark.parametrize("sql", [
    "SELECT * FROM TCP [RANGE 1 MILLISECONDS]", "SELECT * FROM TCP [RANGE 8760 HOURS]",
    "SELECT * FROM TCP [ROWS 2147483648] WINDOW [1]", "SELECT COUNT(*) FROM TCP WINDOW [1]",
    "SELECT TCP.src_host AS h, COUNT(TCP.bytes) FROM TCP GROUP BY TCP.src_host WINDOW [1]",
])
def test_the_windows_and_lists_at_the_bounds_still_parse(dec_catalog, sql):
    parse_query(sql, dec_catalog)


# -- fidelity: a deadline's options need a deadline -----------------------------------------
@pytest.fixture(scope="module")
def tcp_trace(dec_toml, tmp_path_factory):
    out = tmp_path_factory.mktemp("round3-rest") / "gen"
    assert main(["generate", "--catalog", dec_toml, "--out", str(out), "--duration", "3",
                 "--streams", "TCP", "--format", "parquet"]) == 0
    return out / "TCP.parquet"


@pytest.mark.parametrize("option", [["--min-kept", "0.5"], ["--delta", "0.1"]])
def test_fidelity_refuses_a_deadlines_option_without_a_deadline(no_spark_start, dec_toml,
                                                                workload_toml, tcp_trace,
                                                                tmp_path, capsys, option):
    out = tmp_path / "report"
    code = main(["fidelity", "--catalog", dec_toml, "--workload", workload_toml, "--out",
                 str(out), "--trace", f"TCP={tcp_trace}", "--query", "Q1", "--quiet", *option])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("cqopt: error: ") and err.count("\n") == 1, err
    assert f"{' '.join(option)} is given without a deadline" in err and "--deadline" in err
    assert "Spark started" not in err and not out.exists()
    # the API says it too, and a query's own deadline in the workload is a deadline
    workload = tmp_path / "w.toml"
    workload.write_text(Path(workload_toml).read_text())
    with pytest.raises(CqoptError, match="min_kept = 0.5 is given without a deadline"):
        cqopt.fidelity(dec_toml, str(workload), out, traces={"TCP": str(tcp_trace)},
                       queries=["Q1"], min_kept=0.5, progress=False)
    workload.write_text(Path(workload_toml).read_text().replace(
        'name = "Q1"', 'name = "Q1"\ndeadline = 0.5', 1))
    with pytest.raises(AssertionError, match="Spark started"):
        cqopt.fidelity(dec_toml, str(workload), out, traces={"TCP": str(tcp_trace)},
                       queries=["Q1"], min_kept=0.5, progress=False)


# -- the round-robin scheduler keeps a query whose round was refused ------------------------
def test_a_refused_round_is_reported_and_its_query_stays_scheduled():
    from types import SimpleNamespace

    import numpy as np

    from cqopt.charts.lookup import QueryChart
    from cqopt.charts.spec import Axis, ChartSpec
    from cqopt.runtime.adaptive import AdaptiveQuery
    from cqopt.runtime.scheduler import RoundRobin

    spec = ChartSpec("q", "x", (Axis("sel.S", 0.0, 1.0, 2),))
    chart = QueryChart(spec, [SimpleNamespace(id="A"), SimpleNamespace(id="B")],
                       np.array([0, 1]), np.zeros(2))
    rr = RoundRobin({n: AdaptiveQuery(chart, estimator="last") for n in ("q1", "q2")})
    log = rr.run({"q1": [{"sel.S": 0.1}] * 2, "q2": [{"sel.S": "nonsense"}, {"sel.S": 0.9}]})
    assert [name for name, _ in log] == ["q1", "q1", "q2"]
    assert [name for name, _ in rr.refused] == ["q2"] and "sel.S" in str(rr.refused[0][1])
    # a later run schedules both again, the refused one and the one whose feed ended
    log = rr.run({"q1": [{"sel.S": 0.2}], "q2": [{"sel.S": 0.8}]})
    assert sorted(name for name, _ in log) == ["q1", "q2"]
    assert rr.queries["q2"].rounds == 2


# -- fidelity says which tuples it did not replay --------------------------------------------
def test_fidelity_says_the_trailing_tuples_it_did_not_replay(monkeypatch, dec_toml,
                                                            workload_toml, tcp_trace,
                                                            tmp_path, capsys):
    """The trace's tuples after its last whole round (585 of 13,639 in the audit) are in no
    round: said on the console and in the report, not left out in silence."""
    from types import SimpleNamespace

    import numpy as np
    import pandas as pd

    def statistics(chosen, catalog, paths, times, rounds, master, progress, name):
        table = pd.DataFrame({"round": np.arange(29), "start": np.arange(29) * 1.0,
                              "rate.TCP": np.full(29, 450.0), "sel.TCP": np.full(29, 0.2)})
        table.attrs = {"window_s": 1.0, "start": 0.0, "query": chosen[0][1].sql}
        info = SimpleNamespace(path=str(tcp_trace), rows=13_639, start=0.0, end=29.9,
                               out_of_order=0, late=0, unparsed={})
        return {"Q1": table}, {"TCP": info}

    monkeypatch.setattr("cqopt.api._fidelity.trace_statistics", statistics)
    out = tmp_path / "report"
    assert main(["fidelity", "--catalog", dec_toml, "--workload", workload_toml, "--out",
                 str(out), "--trace", f"TCP={tcp_trace}", "--query", "Q1", "--k-sweep",
                 "none", "--quiet"]) == 0
    said = ("the last 589 tuples of TCP, after the last whole round (29 rounds of 1 s), "
            "were not replayed")
    assert f"Q1: {said}" in capsys.readouterr().err
    assert said in (out / "report.md").read_text()


# -- a trace with flipped bytes is refused ---------------------------------------------------
def test_a_parquet_trace_with_flipped_bytes_is_refused_before_spark(no_spark_start, dec_toml,
                                                                    workload_toml, tcp_trace,
                                                                    tmp_path, capsys):
    import pyarrow.parquet as pq

    assert pq.ParquetFile(tcp_trace).metadata.num_rows > 0
    data = bytearray(tcp_trace.read_bytes())
    middle = len(data) // 3
    data[middle:middle + 200] = bytes(b ^ 0x5A for b in data[middle:middle + 200])
    flipped = tmp_path / "TCP.parquet"
    flipped.write_bytes(bytes(data))
    out = tmp_path / "report"
    code = main(["fidelity", "--catalog", dec_toml, "--workload", workload_toml, "--out",
                 str(out), "--trace", f"TCP={flipped}", "--query", "Q1", "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "is corrupt" in err, err
    assert str(flipped) in err and "Spark started" not in err and not out.exists()
