"""Per-round statistics on Spark: hand-computed rounds, and a pandas cross-check."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from cqopt.catalog import Catalog, load_catalog
from cqopt.optimizer.query.logical import parse_query
from cqopt.replay.rounds import (
    RoundStatsError,
    read_round_statistics,
    round_of,
    write_round_statistics,
)
from cqopt.replay.trace_generate import generate_trace
from cqopt.replay.trace_write import write_trace
from cqopt.spark.round_stats import round_statistics
from cqopt.spark.trace_read import read_trace


NAN = math.nan

CATALOG = Catalog.from_dict({"streams": {
    "A": {"rate": [1, 10], "columns": {"ts": "timestamp", "k": "int", "v": "int",
                                       "s": "string(4)"}},
    "B": {"rate": [1, 10], "columns": {"ts": "timestamp", "k": "int", "v": "int"}},
    "C": {"rate": [1, 10], "columns": {"ts": "timestamp", "k": "int"}},
}})

# Rounds of 2 s from 0: [0,2) [2,4) [4,6) [6,8). A is empty in round 2; A's rows are
# not in time order (0.2 and 1.99 come late; 2.0 and 6.0 sit on a boundary).
A_ROWS = [  # ts, k, v, s
    (0.5, 1, 3, "x"), (1.0, 2, 6, "y"), (1.5, 1, 4, "z"), (0.2, 3, 5, "x"),
    (2.0, 1, 1, "x"), (3.9, 2, 2, "y"), (2.5, 2, 5, "y"), (7.5, 1, 3, "x"),
    (6.0, 3, 4, "y"), (1.99, 2, 3, "x"),
]
B_ROWS = [  # ts, k, v
    (0.0, 1, 10), (0.7, 1, 2), (1.2, 2, 7), (3.0, 1, 4), (3.1, 3, 0), (4.5, 2, 1),
    (5.9, 1, 9), (6.5, 5, 5),
]
C_ROWS = [(0.3, 1), (1.1, 2), (1.8, 2), (2.2, 1), (2.4, 1), (2.9, 3), (5.0, 2), (6.1, 4)]


@pytest.fixture(scope="module")
def tiny(spark):
    frames = {
        "A": pd.DataFrame(A_ROWS, columns=["ts", "k", "v", "s"]),
        "B": pd.DataFrame(B_ROWS, columns=["ts", "k", "v"]),
        "C": pd.DataFrame(C_ROWS, columns=["ts", "k"]),
    }
    return {name: spark.createDataFrame(frame).cache() for name, frame in frames.items()}


def _check(table: pd.DataFrame, expected: dict[str, list[float]]) -> None:
    for name, values in expected.items():
        np.testing.assert_allclose(table[name].to_numpy(), values, rtol=1e-12, equal_nan=True,
                                   err_msg=name)


def test_selection_rate_and_empty_round(tiny):
    q = parse_query("SELECT * FROM A WHERE A.v > 2 AND A.v <= 5 AND A.s IN ('x', 'y') "
                    "WINDOW [2]", CATALOG)
    table = round_statistics(q, tiny, 2.0)  # start: the earliest time of A (0.2)
    assert table.attrs["start"] == 0.2
    # A's last tuple, 7.5, is inside round 3 ([6, 8)): by default only rounds 0-2 are complete.
    assert round_statistics(q, tiny, 2.0, start=0.0)["round"].tolist() == [0, 1, 2]
    table = round_statistics(q, tiny, 2.0, start=0.0, rounds=4)
    assert list(table.columns) == ["round", "start", "rate.A", "sel.A"]
    assert table["round"].tolist() == [0, 1, 2, 3] and table["start"].tolist() == [0, 2, 4, 6]
    _check(table, {"rate.A": [2.5, 1.5, 0.0, 1.0],  # 5, 3, 0, 2 tuples in 2 s
                   "sel.A": [3 / 5, 1 / 3, NAN, 1.0]})
    assert table.attrs["window_s"] == 2.0 and table.attrs["query"] == q.sql


def test_rounds_and_start_given(tiny):
    q = parse_query("SELECT * FROM A WHERE A.v > 2 WINDOW [2]", CATALOG)
    table = round_statistics(q, tiny, 2.0, start=-2.0, rounds=7)
    assert table["start"].tolist() == [-2, 0, 2, 4, 6, 8, 10]
    _check(table, {"rate.A": [0, 2.5, 1.5, 0, 1.0, 0, 0],
                   "sel.A": [NAN, 1.0, 1 / 3, NAN, 1.0, NAN, NAN]})
    assert round_statistics(q, tiny, 2.0, start=0.0, rounds=0).shape == (0, 4)
    only_late = round_statistics(q, tiny, 2.0, start=2.0, rounds=1)  # earlier rows dropped
    _check(only_late, {"rate.A": [1.5], "sel.A": [1 / 3]})


def test_only_complete_rounds_by_default(spark):
    """A trailing round the trace stops inside would read a low rate: it is left out."""
    q = parse_query("SELECT * FROM C WHERE C.k > 1 WINDOW [2]", CATALOG)

    def table(times, **kwargs):
        frame = spark.createDataFrame(pd.DataFrame({"ts": times, "k": 2}))
        return round_statistics(q, {"C": frame}, 2.0, **kwargs)

    # [0, 2) and [2, 4) are covered; the trace stops inside [4, 6) at 5.0.
    _check(table([0.0, 1.0, 2.5, 3.0, 5.0]), {"rate.C": [1.0, 1.0], "sel.C": [1.0, 1.0]})
    # A tuple on the boundary opens the next round; the trace covers the previous one to its end.
    assert table([0.0, 1.0, 4.0])["round"].tolist() == [0, 1]
    assert table([0.0, 1.0, 3.9])["round"].tolist() == [0]
    # No round complete: the one partial round is kept rather than nothing.
    _check(table([0.0, 0.5, 1.5]), {"rate.C": [1.5], "sel.C": [1.0]})
    _check(table([7.0]), {"rate.C": [0.5]})
    # Rounds given: every one of them, the partial last one included.
    _check(table([0.0, 1.0, 2.5, 3.0, 5.0], rounds=3), {"rate.C": [1.0, 1.0, 0.5]})
    # A start after the last tuple: no round at all.
    assert len(table([0.0, 1.0], start=4.0)) == 0


def test_selection_predicate_with_nulls(spark):
    """The grouped selection is one condition: a NULL passes no comparison, NOT IN included."""
    frame = spark.createDataFrame([(0.1, 1), (0.2, None), (0.3, 3), (0.4, 5), (0.5, 4)],
                                  "ts double, v long")
    for sql, passing in [("A.v <> 3", 3), ("NOT A.v IN (3, 4)", 2), ("A.v > 1", 3),
                         ("A.v < 2 OR A.v >= 4", 3), ("A.v > 1 AND A.v < 1", 0)]:
        q = parse_query(f"SELECT * FROM A WHERE {sql} WINDOW [1]", CATALOG)
        _check(round_statistics(q, {"A": frame}, 1.0, start=0.0),
               {"rate.A": [5.0], "sel.A": [passing / 5]})


@pytest.mark.filterwarnings("ignore:toPandas attempted Arrow optimization")
def test_a_failing_spark_job_is_a_round_stats_error(spark, tmp_path):
    """A trace file deleted after it was read fails the job: one clear error, not Spark's."""
    path = tmp_path / "c.parquet"
    pd.DataFrame({"ts": [0.5, 1.5], "k": [1, 2]}).to_parquet(path)
    frame = spark.read.parquet(str(path))
    path.unlink()
    q = parse_query("SELECT * FROM C WINDOW [1]", CATALOG)
    expected = (r"^Spark failed computing the per-round statistics of 'SELECT \* FROM C "
                r"WINDOW \[1\]': SparkException: \[FAILED_READ_FILE\S*\] .*c\.parquet")
    with pytest.raises(RoundStatsError, match=expected):
        round_statistics(q, {"C": frame}, 1.0, start=0.0, rounds=2)


def test_residual_and_interval_unions(tiny):
    residual = parse_query("SELECT * FROM A WHERE A.v > A.k AND (A.k = 1 OR A.s = 'y') "
                           "WINDOW [2]", CATALOG)
    assert len(residual.selections["A"].residual) == 2
    _check(round_statistics(residual, tiny, 2.0, start=0.0, rounds=4),
           {"sel.A": [3 / 5, 1 / 3, NAN, 1.0]})
    union = parse_query("SELECT * FROM A WHERE (A.v < 2 OR A.v >= 5) AND A.k <> 3 WINDOW [2]",
                        CATALOG)
    _check(round_statistics(union, tiny, 2.0, start=0.0, rounds=4),
           {"sel.A": [1 / 5, 2 / 3, NAN, 0.0]})
    never = parse_query("SELECT * FROM A WHERE A.v > 5 AND A.v < 3 WINDOW [2]", CATALOG)
    assert never.selections["A"].always_empty and never.selections["A"].predicate_sql == "FALSE"
    _check(round_statistics(never, tiny, 2.0, start=0.0, rounds=4), {"sel.A": [0, 0, NAN, 0]})


def test_two_stream_equi_join(tiny):
    q = parse_query("SELECT * FROM A, B WHERE A.k = B.k AND A.s = 'x' WINDOW [2]", CATALOG)
    table = round_statistics(q, tiny, 2.0, rounds=4)  # start 0.0: B's first tuple
    assert list(table.columns) == ["round", "start", "rate.A", "rate.B", "sel.A", "jsel.A.B"]
    _check(table, {
        "rate.A": [2.5, 1.5, 0.0, 1.0], "rate.B": [1.5, 1.0, 1.0, 0.5],
        "sel.A": [3 / 5, 1 / 3, NAN, 1 / 2],
        # A.k by round {1:2, 2:2, 3:1} {1:1, 2:2} {} {1:1, 3:1}; B.k {1:2, 2:1} {1:1, 3:1}
        # {1:1, 2:1} {5:1}: the join over all tuples (selections are separate factors)
        "jsel.A.B": [6 / 15, 1 / 6, NAN, 0.0],
    })


def test_theta_join_alone_and_with_an_equi_join(tiny):
    theta = parse_query("SELECT * FROM A, B WHERE A.v < B.v WINDOW [2]", CATALOG)
    assert theta.statistics[-1] == "jsel.A.B" and not theta.joins
    _check(round_statistics(theta, tiny, 2.0, rounds=4),
           {"jsel.A.B": [10 / 15, 2 / 6, NAN, 1.0]})
    both = parse_query("SELECT * FROM A, B WHERE A.k = B.k AND A.v < B.v WINDOW [2]", CATALOG)
    _check(round_statistics(both, tiny, 2.0, rounds=4), {"jsel.A.B": [4 / 15, 1 / 6, NAN, 0.0]})


def test_three_stream_equi_join_with_its_closure(tiny):
    q = parse_query("SELECT * FROM A, B, C WHERE A.k = B.k AND B.k = C.k WINDOW [2]", CATALOG)
    assert q.statistics == ("rate.A", "rate.B", "rate.C", "jsel.A.B", "jsel.A.C", "jsel.B.C")
    table = round_statistics(q, tiny, 2.0, rounds=4)
    _check(table, {
        "rate.C": [1.5, 1.5, 0.5, 0.5],
        "jsel.A.B": [6 / 15, 1 / 6, NAN, 0.0],
        "jsel.A.C": [6 / 15, 2 / 9, NAN, 0.0],  # implied by the closure
        "jsel.B.C": [4 / 9, 3 / 6, 1 / 2, 0.0],
    })


def test_round_boundaries_follow_floating_point_bounds():
    assert round_of(0.3, 0.0, 0.1) == 2  # 0.3 < 3 * 0.1 = 0.30000000000000004
    assert round_of(0.30000000000000004, 0.0, 0.1) == 3
    assert [round_of(t, 1.0, 0.5) for t in (1.0, 1.49, 1.5, 0.99)] == [0, 0, 1, -1]


def test_boundary_rows_agree_with_round_of(spark):
    times = [0.1 * i for i in range(40)] + [0.3, 0.7, 2.9999999999999996]
    frame = spark.createDataFrame(pd.DataFrame({"ts": times, "k": 1, "v": 1, "s": "x"}))
    q = parse_query("SELECT * FROM A WINDOW [0.1]", CATALOG)
    table = round_statistics(q, {"A": frame}, 0.1, start=0.0, rounds=40)  # 3.9 is in round 39
    expected = np.bincount([round_of(t, 0.0, 0.1) for t in times], minlength=len(table))
    np.testing.assert_array_equal(np.rint(table["rate.A"] * 0.1), expected)


def test_missing_trace_or_column(tiny, spark):
    q = parse_query("SELECT * FROM A, C WHERE A.k = C.k AND A.v > 1 WINDOW [2]", CATALOG)
    with pytest.raises(RoundStatsError, match="no trace for stream C of the query; traces "
                                              "given: A, B"):
        round_statistics(q, {"A": tiny["A"], "B": tiny["B"]}, 2.0)
    no_v = tiny["A"].drop("v")
    with pytest.raises(RoundStatsError, match=r"the trace of A has no column v.*ts, k, s"):
        round_statistics(q, {"a": no_v, "c": tiny["C"]}, 2.0)
    with pytest.raises(RoundStatsError, match="window_s must be a positive"):
        round_statistics(q, tiny, 0.0)
    empty = spark.createDataFrame(pd.DataFrame({"ts": [0.5], "k": [1]})).where("ts > 1")
    with pytest.raises(RoundStatsError, match="hold no tuple; pass start= and rounds="):
        round_statistics(parse_query("SELECT * FROM C WINDOW [1]", CATALOG), {"C": empty}, 1.0)
    table = round_statistics(parse_query("SELECT * FROM C WINDOW [1]", CATALOG), {"C": empty},
                             1.0, start=0.0, rounds=2)
    assert table["rate.C"].tolist() == [0.0, 0.0]


def test_parquet_round_trip(tiny, tmp_path):
    q = parse_query("SELECT * FROM A, B WHERE A.k = B.k AND A.s = 'x' WINDOW [2]", CATALOG)
    table = round_statistics(q, tiny, 2.0)
    path = write_round_statistics(table, tmp_path / "rounds" / "q.parquet")
    back = read_round_statistics(path)
    pd.testing.assert_frame_equal(back, table)
    assert back.attrs["window_s"] == 2.0
    with pytest.raises(RoundStatsError, match="no such file"):
        read_round_statistics(tmp_path / "none.parquet")
    pd.DataFrame({"x": [1]}).to_parquet(tmp_path / "other.parquet")
    with pytest.raises(RoundStatsError, match="not a round statistics table"):
        read_round_statistics(tmp_path / "other.parquet")


# -- a generated trace against pandas ---------------------------------------------------------
def _pandas_statistics(query, frames: dict[str, pd.DataFrame], window_s: float, start: float,
                       rounds: int) -> pd.DataFrame:
    """The same statistics the straightforward way, for the query of the test below."""
    out = {"round": np.arange(rounds), "start": start + np.arange(rounds) * window_s}
    tagged = {}
    for name, frame in frames.items():
        r = np.floor((frame.ts.to_numpy() - start) / window_s).astype(int)
        frame = frame.assign(round=r)[(r >= 0) & (r < rounds)]
        tagged[name] = frame
        out[f"rate.{name}"] = np.bincount(frame["round"], minlength=rounds) / window_s
    tcp, udp = tagged["TCP"], tagged["UDP"]
    n_tcp = np.bincount(tcp["round"], minlength=rounds)
    n_udp = np.bincount(udp["round"], minlength=rounds)
    passed = np.bincount(tcp["round"], weights=((tcp.dest_host == 2) | (tcp.bytes > 40)),
                         minlength=rounds)
    with np.errstate(invalid="ignore", divide="ignore"):
        out["sel.TCP"] = np.where(n_tcp > 0, passed / n_tcp, np.nan)
    pairs = tcp.merge(udp, left_on=["round", "src_host"], right_on=["round", "dest_host"])
    matches = np.bincount(pairs["round"], minlength=rounds)
    with np.errstate(invalid="ignore", divide="ignore"):
        out["jsel.TCP.UDP"] = np.where(n_tcp * n_udp > 0, matches / (n_tcp * n_udp), np.nan)
    return pd.DataFrame(out)[["round", "start", *query.statistics]]


def test_generated_traces_match_pandas(examples, spark, tmp_path):
    catalog = load_catalog(examples / "dec-pkt.toml")
    q = parse_query("SELECT * FROM TCP, UDP WHERE TCP.src_host = UDP.dest_host "
                    "AND (TCP.dest_host = 2 OR TCP.bytes > 40) WINDOW [1]", catalog)
    generated = {name: generate_trace(catalog.stream(name), 40.0, seed=i, mean_rate=rate,
                                      drift_period_s=10.0)
                 for i, (name, rate) in enumerate([("TCP", 200.0), ("UDP", 150.0)])}
    frames = {}
    for name, frame in generated.items():
        path = write_trace(frame, tmp_path / f"{name}.parquet")
        frames[name], _ = read_trace(spark, path, catalog.stream(name))
    table = round_statistics(q, frames, 1.0)
    start = min(f.ts.min() for f in generated.values())
    expected = _pandas_statistics(q, generated, 1.0, start, len(table))
    assert len(table) == 39  # 40 s of trace from its first arrival: the 40th round is partial
    pd.testing.assert_frame_equal(table, expected, check_dtype=False, rtol=1e-12)
    assert table["sel.TCP"].std() > 0.02  # the generator's drift shows up per round


def test_epa_http_hourly_rounds(shared_data, spark):
    """EPA-HTTP's SOURCE.md: the first, partial hour has 63 requests, the peak 4,716."""
    path = shared_data / "epa-http" / "epa-http.parsed.csv"
    if not path.exists():
        pytest.skip(f"the EPA-HTTP trace is not here ({path})")
    http = Catalog.from_dict({"streams": {"HTTP": {"rate": [0.05, 2], "columns": {
        "method": "string(8)", "status": "int"}}}})
    frame, info = read_trace(spark, path, http.stream("HTTP"), ts_column="sec_since_0829_0000")
    q = parse_query("SELECT * FROM HTTP WHERE HTTP.method = 'GET' WINDOW [3600]", http)
    # From 29 Aug 23:00 to the last request (30 Aug 23:53): 24 complete hours, and 25 rounds
    # when asked for, to count every request.
    assert len(round_statistics(q, {"HTTP": frame}, 3600.0, start=23 * 3600.0)) == 24
    table = round_statistics(q, {"HTTP": frame}, 3600.0, start=23 * 3600.0, rounds=25)
    requests = np.rint(table["rate.HTTP"] * 3600).astype(int)
    assert len(table) == 25 and requests.sum() == info.rows == 47_748
    assert requests.iloc[0] == 63 and requests.max() == 4_716
    gets = (table["sel.HTTP"] * requests).sum()
    assert gets == pytest.approx(46_020)  # SOURCE.md: GET 46,020


def test_a_workload_in_one_pass_gives_each_query_its_own_table(tiny):
    """Queries sharing streams, with different rounds, selections and join columns: the
    workload's tables are exactly the one-query tables (same rounds, same doubles)."""
    from cqopt.spark.round_stats import workload_round_statistics

    sqls = [("SELECT * FROM A, B WHERE A.k = B.k AND A.s = 'x' WINDOW [2]", 2.0),
            ("SELECT * FROM A WHERE A.v > 2 WINDOW [1]", 1.0),
            ("SELECT * FROM A, B, C WHERE A.k = B.k AND B.k = C.k WINDOW [2]", 2.0),
            ("SELECT * FROM A, B WHERE A.v < B.v WINDOW [3]", 3.0),
            ("SELECT * FROM C WINDOW [2]", 2.0)]
    queries = [parse_query(sql, CATALOG) for sql, _ in sqls]
    windows = [w for _, w in sqls]
    for kwargs in ({}, {"start": 0.0, "rounds": 4}):
        together = workload_round_statistics(queries, tiny, windows, **kwargs)
        assert len(together) == len(queries)
        for query, window_s, table in zip(queries, windows, together):
            alone = round_statistics(query, tiny, window_s, **kwargs)
            pd.testing.assert_frame_equal(table, alone, check_exact=True)
            assert table.attrs == alone.attrs
    with pytest.raises(RoundStatsError, match="one per query"):
        workload_round_statistics(queries, tiny, [1.0, 2.0])
