"""Reading traces with Spark, and the seeded trace generator."""

from __future__ import annotations

import gzip
import math

import numpy as np
import pandas as pd
import pytest

from cqopt.catalog import Catalog, load_catalog
from cqopt.replay.trace_format import TraceError, trace_format
from cqopt.replay.trace_generate import generate_trace, load_interarrivals, zipf_share
from cqopt.replay.trace_write import write_trace
from cqopt.spark.trace_read import read_trace


@pytest.fixture(scope="module")
def dec_catalog(examples) -> Catalog:
    return load_catalog(examples / "dec-pkt.toml")


@pytest.fixture(scope="module")
def small_trace(dec_catalog) -> pd.DataFrame:
    return generate_trace(dec_catalog.stream("TCP"), 20.0, seed=3, mean_rate=40.0)


def _csv(path, text: str):
    path.write_text(text, encoding="utf-8")
    return path


# -- formats -------------------------------------------------------------------------
@pytest.mark.parametrize("ext", ["dec", "csv", "csv.gz", "parquet"])
def test_each_format_reads_back_what_was_written(spark, tmp_path, dec_catalog, small_trace, ext):
    path = write_trace(small_trace, tmp_path / f"TCP.{ext}")
    df, info = read_trace(spark, path, dec_catalog.stream("TCP"))
    assert df.columns == ["ts", "src_host", "dest_host", "src_port", "dest_port", "bytes"]
    assert dict(df.dtypes)["ts"] == "double" and dict(df.dtypes)["bytes"] == "bigint"
    back = df.toPandas().sort_values("ts", kind="stable").reset_index(drop=True)
    expected = small_trace
    if ext == "dec":  # the text format keeps microseconds
        expected = small_trace.assign(ts=small_trace.ts.round(6))
    assert len(back) == len(expected) == info.rows
    np.testing.assert_allclose(back.ts, expected.ts, rtol=0, atol=1e-9)
    for column in ("src_host", "dest_host", "src_port", "dest_port", "bytes"):
        np.testing.assert_array_equal(back[column], expected[column])
    assert info.format == trace_format(path)
    assert info.start == pytest.approx(expected.ts.min()) and info.end == pytest.approx(
        expected.ts.max())
    assert (info.out_of_order, info.late, info.missing, info.unparsed) == (0, 0, (), {})


def test_format_from_the_name_or_given(tmp_path):
    assert trace_format("a/b/dec-pkt-1.tcp") == "dec"
    assert trace_format("x.CSV.GZ") == "csv"
    assert trace_format("x.data", "Parquet") == "parquet"
    with pytest.raises(TraceError, match="x.data.*fmt="):
        trace_format("x.data")
    with pytest.raises(TraceError, match="unknown trace format 'json'"):
        trace_format("x.csv", "json")


def test_columns_match_case_insensitively_and_take_catalog_types(spark, tmp_path):
    cat = Catalog.from_dict({"streams": {"S": {"rate": [1, 10], "columns": {
        "at": "timestamp", "n": "int", "x": "double", "ok": "bool", "tag": "string(4)",
        "gone": "long"}}}})
    path = _csv(tmp_path / "s.csv", "AT,N,X,Ok,TAG,extra\n"
                                    "1.5,12.0,0.25,true,a,9\n"
                                    "2.5, 7 ,1e3,0,b,9\n"
                                    "3.5,x,2,yes,c,9\n")
    df, info = read_trace(spark, path, cat.stream("S"))
    assert df.columns == ["ts", "at", "n", "x", "ok", "tag"]
    assert dict(df.dtypes) == {"ts": "double", "at": "double", "n": "bigint", "x": "double",
                               "ok": "boolean", "tag": "string"}
    rows = [tuple(r) for r in df.orderBy("ts").collect()]
    assert rows == [(1.5, 1.5, 12, 0.25, True, "a"), (2.5, 2.5, 7, 1000.0, False, "b"),
                    (3.5, 3.5, None, 2.0, True, "c")]
    assert info.ts_column == "AT" and info.missing == ("gone",)
    assert info.unparsed == {"n": 1}  # 'x' is no integer: counted, not hidden


def test_parquet_timestamps_become_seconds(spark, tmp_path):
    cat = Catalog.from_dict({"streams": {"S": {"rate": [1, 10], "columns": {
        "when": "timestamp", "a": "int"}}}})
    frame = pd.DataFrame({"when": pd.to_datetime([0.5, 2.0], unit="s"), "a": [1, 2]})
    frame.to_parquet(tmp_path / "s.parquet", coerce_timestamps="us")
    df, info = read_trace(spark, tmp_path / "s.parquet", cat.stream("S"))
    assert [tuple(r) for r in df.orderBy("ts").collect()] == [(0.5, 0.5, 1), (2.0, 2.0, 2)]
    assert (info.start, info.end) == (0.5, 2.0)
    frame.to_parquet(tmp_path / "nanos.parquet")  # pandas' default: Spark cannot read it
    with pytest.raises(TraceError, match=r"nanos\.parquet: Spark cannot read it.*"
                                         r"coerce_timestamps='us'"):
        read_trace(spark, tmp_path / "nanos.parquet", cat.stream("S"))


def test_time_scale_converts_milliseconds(spark, tmp_path):
    cat = Catalog.from_dict({"streams": {"S": {"rate": [1, 10], "columns": {"a": "int"}}}})
    path = _csv(tmp_path / "s.csv", "ts_ms,a\n1000,1\n2500,2\n")
    df, info = read_trace(spark, path, cat.stream("S"), ts_column="ts_ms", time_scale=1e-3)
    assert [r.ts for r in df.orderBy("ts").collect()] == [1.0, 2.5]
    assert info.duration == 1.5 and info.mean_rate == pytest.approx(2 / 1.5)


# -- order ---------------------------------------------------------------------------
def test_out_of_order_and_late_rows_are_counted_and_kept(spark, tmp_path):
    cat = Catalog.from_dict({"streams": {"S": {"rate": [1, 10], "columns": {"a": "int"}}}})
    times = [1, 3, 2, 5, 4, 4.5, 6, 1.5]  # backwards at 2, 4, 1.5; below the max at 2, 4, 4.5, 1.5
    path = _csv(tmp_path / "s.csv", "ts,a\n" + "".join(f"{t},{i}\n" for i, t in enumerate(times)))
    df, info = read_trace(spark, path, cat.stream("S"))
    assert (info.rows, info.out_of_order, info.late) == (8, 3, 4)
    assert sorted(r.ts for r in df.collect()) == sorted(times)


def test_order_counts_hold_across_file_splits(spark, tmp_path):
    """A file Spark reads as many splits: order is file order, split boundaries included."""
    cat = Catalog.from_dict({"streams": {"S": {"rate": [1, 10], "columns": {"a": "int"}}}})
    rng = np.random.default_rng(5)
    ts = np.round(np.arange(4000) * 0.01 + rng.normal(0, 0.02, 4000), 4)
    path = tmp_path / "s.csv"
    pd.DataFrame({"ts": ts, "a": np.arange(4000)}).to_csv(path, index=False)
    running_max = np.maximum.accumulate(ts)
    expected = (int((np.diff(ts) < 0).sum()), int((ts[1:] < running_max[:-1]).sum()))
    keys = ("spark.sql.files.maxPartitionBytes", "spark.sql.files.openCostInBytes")
    saved = {k: spark.conf.get(k, None) for k in keys}
    spark.conf.set(keys[0], "4096")
    spark.conf.set(keys[1], "0")
    try:
        df, info = read_trace(spark, path, cat.stream("S"))
        assert df.rdd.getNumPartitions() > 4
    finally:
        for key, value in saved.items():
            spark.conf.unset(key) if value is None else spark.conf.set(key, value)
    assert expected[0] > 100
    assert (info.out_of_order, info.late) == expected


# -- the real traces -----------------------------------------------------------------------
def test_epa_http_log(shared_data, spark):
    EPA = shared_data / "epa-http" / "epa-http.parsed.csv"
    if not EPA.exists():
        pytest.skip(f"the EPA-HTTP trace is not here ({EPA})")
    cat = Catalog.from_dict({"streams": {"HTTP": {"rate": [0.05, 2], "columns": {
        "host": "string(32)", "method": "string(8)", "url": "string(96)", "status": "int",
        "bytes": "int"}}}})
    df, info = read_trace(spark, EPA, cat.stream("HTTP"), ts_column="sec_since_0829_0000")
    assert info.rows == 47_748
    assert info.out_of_order == 15  # SOURCE.md: 15 places where the timestamp goes backwards
    assert info.late >= info.out_of_order
    assert (info.start, info.end) == (86005.0, 172387.0)  # 23:53:25 .. 23:53:07 next day
    assert info.unparsed == {"bytes": 5310}  # the '-' sizes of the original log
    assert df.columns == ["ts", "host", "method", "url", "status", "bytes"]
    assert df.where("method = 'GET'").count() == 46_020


def test_dec_pkt_1_arrivals(shared_data, spark, dec_catalog):
    DEC_ARRIVALS = shared_data / "dec-pkt-1-udp" / "dec-pkt-1-udp.arrivals.csv.gz"
    if not DEC_ARRIVALS.exists():
        pytest.skip(f"the DEC-PKT-1 arrivals are not here ({DEC_ARRIVALS})")
    df, info = read_trace(spark, DEC_ARRIVALS, dec_catalog.stream("UDP"), ts_column="ts_seconds")
    assert info.rows == 829_758
    assert (info.start, info.end) == (0.0, 3599.940464)
    assert (info.out_of_order, info.late) == (0, 0)  # SOURCE.md: never decreases
    assert df.columns == ["ts"]  # no header fields; the catalog's ts is the arrival time
    assert info.missing == ("src_host", "dest_host", "src_port", "dest_port", "bytes")
    assert info.mean_rate == pytest.approx(230.5, abs=0.1)


# -- errors ----------------------------------------------------------------------------
def test_missing_file(spark, tmp_path, dec_catalog):
    with pytest.raises(TraceError, match=r"nope\.csv: no such file"):
        read_trace(spark, tmp_path / "nope.csv", dec_catalog.stream("TCP"))


def test_no_timestamp_column_says_which_columns_and_what_to_pass(spark, tmp_path):
    cat = Catalog.from_dict({"streams": {"S": {"rate": [1, 10], "columns": {"a": "int"}}}})
    path = _csv(tmp_path / "nots.csv", "when,a\n1,2\n")
    with pytest.raises(TraceError) as err:
        read_trace(spark, path, cat.stream("S"))
    message = str(err.value)
    assert "nots.csv" in message and "its columns are when, a" in message
    assert "ts_column=" in message
    with pytest.raises(TraceError, match=r"nots\.csv: no column 'wen'.*when, a"):
        read_trace(spark, path, cat.stream("S"), ts_column="wen")


def test_non_numeric_timestamp(spark, tmp_path):
    cat = Catalog.from_dict({"streams": {"S": {"rate": [1, 10], "columns": {"a": "int"}}}})
    path = _csv(tmp_path / "badts.csv", "ts,a\n1.0,1\n2.0,2\nnoon,3\n")
    with pytest.raises(TraceError, match=r"badts\.csv: 1 of 3 rows have no numeric timestamp.*"
                                         r"'noon'"):
        read_trace(spark, path, cat.stream("S"))


def test_malformed_dec_lines(spark, tmp_path, dec_catalog):
    path = _csv(tmp_path / "bad.dec", "0.5 1 2 3 4 5\n\n1.0 1 2 3\n")
    with pytest.raises(TraceError, match=r"bad\.dec: 1 of 2 lines are not DEC-PKT.*'1.0 1 2 3'"):
        read_trace(spark, path, dec_catalog.stream("TCP"))


def test_unreadable_parquet_is_a_trace_error(spark, tmp_path, dec_catalog):
    path = tmp_path / "junk.parquet"
    path.write_bytes(b"this is not parquet at all\n" * 10)
    with pytest.raises(TraceError, match=r"junk\.parquet: Spark cannot read it"):
        read_trace(spark, path, dec_catalog.stream("TCP"))


def test_empty_and_gzip_files(spark, tmp_path, dec_catalog):
    (tmp_path / "empty.csv").write_text("")
    with pytest.raises(TraceError, match=r"empty\.csv: the file is empty"):
        read_trace(spark, tmp_path / "empty.csv", dec_catalog.stream("TCP"))
    header_only = _csv(tmp_path / "header.csv", "ts,src_host\n")
    with pytest.raises(TraceError, match=r"header\.csv: the trace has no data rows"):
        read_trace(spark, header_only, dec_catalog.stream("TCP"))
    with gzip.open(tmp_path / "t.dec.gz", "wt") as out:
        out.write("0.5 1 2 3 4 5\n0.25 1 2 3 4 6\n")
    df, info = read_trace(spark, tmp_path / "t.dec.gz", dec_catalog.stream("TCP"))
    assert (info.rows, info.out_of_order) == (2, 1)


# -- the generator ---------------------------------------------------------------------------
def test_generator_is_seeded(dec_catalog):
    tcp = dec_catalog.stream("TCP")
    a = generate_trace(tcp, 30.0, seed=11)
    pd.testing.assert_frame_equal(a, generate_trace(tcp, 30.0, seed=11))
    b = generate_trace(tcp, 30.0, seed=12)
    assert len(a) != len(b) or not a.equals(b)
    assert list(a.columns) == ["ts", "src_host", "dest_host", "src_port", "dest_port", "bytes"]
    assert a.ts.is_monotonic_increasing and a.ts.min() >= 0 and a.ts.max() < 30.0


def test_generator_column_types():
    cat = Catalog.from_dict({"streams": {"S": {"rate": [10, 30], "columns": {
        "at": "timestamp", "n": "long", "x": "double", "ok": "bool", "tag": "string(8)"}}}})
    frame = generate_trace(cat.stream("S"), 50.0, seed=1)
    assert list(frame.columns) == ["ts", "at", "n", "x", "ok", "tag"]
    assert frame["at"].equals(frame.ts)
    assert frame.n.dtype == np.int64 and frame.x.dtype == np.float64 and frame.ok.dtype == bool
    assert frame.tag.isin(["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf",
                           "hotel"]).all()
    assert (frame.x > 0).all() and 0.2 < frame.ok.mean() < 0.8


def test_mean_rate_and_rate_cv(dec_catalog):
    tcp = dec_catalog.stream("TCP")  # catalog range 100..1000: the default mean is 550
    frame = generate_trace(tcp, 3600.0, seed=2)
    assert len(frame) / 3600.0 == pytest.approx(550, rel=0.04)
    for cv in (0.1, 0.25, 0.5):
        per_second = np.bincount(generate_trace(tcp, 1800.0, seed=4, mean_rate=500,
                                                rate_cv=cv).ts.astype(int), minlength=1800)
        assert per_second.std() / per_second.mean() == pytest.approx(cv, abs=0.08)


def test_rate_cv_below_poisson_noise_gives_poisson(dec_catalog):
    frame = generate_trace(dec_catalog.stream("TCP"), 600.0, seed=2, mean_rate=25, rate_cv=0.0)
    per_second = np.bincount(frame.ts.astype(int), minlength=600)
    assert per_second.std() / per_second.mean() == pytest.approx(1 / math.sqrt(25), abs=0.03)


def test_zipf_skew(dec_catalog):
    frame = generate_trace(dec_catalog.stream("TCP"), 200.0, seed=6, mean_rate=500,
                           drift_period_s=math.inf)  # no drift: the plain law
    share = frame.dest_host.value_counts(normalize=True)
    assert share.index[0] == 1 and share.index[1] == 2
    assert share.iloc[0] == pytest.approx(zipf_share(1.5, 50), abs=0.01)  # 0.429
    assert share.iloc[1] == pytest.approx(zipf_share(1.5, 50) * 2 ** -1.5, abs=0.01)
    flat = generate_trace(dec_catalog.stream("TCP"), 200.0, seed=6, mean_rate=500, zipf_a=0.01,
                          drift_period_s=math.inf)
    assert flat.dest_host.value_counts(normalize=True).iloc[0] < 0.04  # ~uniform over 50


def test_selectivity_drifts(dec_catalog):
    frame = generate_trace(dec_catalog.stream("TCP"), 1200.0, seed=8, mean_rate=300,
                           drift_period_s=300.0)
    top = frame.dest_host.value_counts().index[0]
    chunk = (frame.ts // 30).astype(int)  # 40 chunks of 30 s
    sel = (frame.dest_host == top).groupby(chunk).mean()
    assert sel.max() - sel.min() > 0.2
    period = (frame.ts // 300).astype(int)
    by_period = (frame.dest_host == top).groupby(period).mean()
    assert by_period.max() - by_period.min() > 0.1  # the ranking rotates between periods


def test_interarrival_reuse(dec_catalog):
    gaps = np.array([0.5, 0.25, 1.0, 0.125])
    frame = generate_trace(dec_catalog.stream("UDP"), 5.0, seed=1, interarrivals=gaps)
    np.testing.assert_allclose(frame.ts, [0, 0.5, 0.75, 1.75, 1.875, 2.375, 2.625, 3.625,
                                          3.75, 4.25, 4.5])  # cycled past the last gap
    scaled = generate_trace(dec_catalog.stream("UDP"), 100.0, seed=1, interarrivals=gaps,
                            mean_rate=10.0)
    assert len(scaled) == pytest.approx(1000, rel=0.01)


def test_real_interarrivals_are_replayed(shared_data, dec_catalog):
    DEC_ARRIVALS = shared_data / "dec-pkt-1-udp" / "dec-pkt-1-udp.arrivals.csv.gz"
    if not DEC_ARRIVALS.exists():
        pytest.skip(f"the DEC-PKT-1 arrivals are not here ({DEC_ARRIVALS})")
    gaps = load_interarrivals(DEC_ARRIVALS)
    assert len(gaps) == 829_757
    assert gaps.mean() == pytest.approx(0.004339, abs=1e-6)
    assert (gaps.min(), gaps.max()) == (1e-6, 0.105408)
    frame = generate_trace(dec_catalog.stream("UDP"), 600.0, seed=1, interarrivals=gaps)
    np.testing.assert_allclose(np.diff(frame.ts), gaps[: len(frame) - 1], atol=1e-9)
    assert len(frame) / 600 == pytest.approx(230, rel=0.1)


def test_load_interarrivals_from_gaps_or_times(tmp_path):
    gaps = load_interarrivals(_csv(tmp_path / "g.csv", "t,inter_arrival_s\n0,\n1,0.5\n2,0.25\n"))
    np.testing.assert_array_equal(gaps, [0.5, 0.25])
    times = load_interarrivals(_csv(tmp_path / "t.csv", "ts,x\n1.0,a\n1.5,b\n3.0,c\n"))
    np.testing.assert_array_equal(times, [0.5, 1.5])
    with pytest.raises(TraceError, match=r"back\.csv: column ts has times that go backwards"):
        load_interarrivals(_csv(tmp_path / "back.csv", "ts\n1\n0.5\n"))
    with pytest.raises(TraceError, match=r"none\.csv: no inter-arrival column.*a, b"):
        load_interarrivals(_csv(tmp_path / "none.csv", "a,b\n1,2\n"))
    with pytest.raises(TraceError, match="no such file"):
        load_interarrivals(tmp_path / "missing.csv")


def test_write_dec_needs_its_columns(tmp_path):
    with pytest.raises(TraceError, match="lacks dest_host"):
        write_trace(pd.DataFrame({"ts": [0.0], "src_host": [1]}), tmp_path / "x.dec")
