"""The Spark engine builds the very charts the local engine builds."""

from __future__ import annotations

import dataclasses
import functools
import random
import shutil
import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pyarrow as pa
import pytest

from cqopt.catalog import Catalog, load_catalog
from cqopt.charts.build import build_local
from cqopt.charts.kernel import Chart, ChartContext, winning_costs
from cqopt.charts.spec import workload_specs
from cqopt.charts.workload import load_workload, workload_from_dict
from cqopt.errors import CqoptError
from cqopt.spark import chart_build
from cqopt.spark.chart_build import build_spark
from cqopt.spark.session import (
    SparkBuildError,
    check_java,
    running_session,
    spark_errors,
    spark_session,
)


WINDOWS = ["", " [RANGE 10 SECONDS]", " [ROWS 100]", " [RANGE 500 MILLISECONDS]"]


def generated_catalog(n_streams: int = 6, seed: int = 1) -> Catalog:
    rng = random.Random(seed)
    streams = {}
    for i in range(n_streams):
        lo = rng.choice([10, 50, 100, 200])
        streams[f"S{i}"] = {"rate": [lo, lo * rng.choice([5, 10, 20])],
                            "columns": {"ts": "timestamp", "a": "int", "b": "int", "c": "long",
                                        "d": "double", "tag": "string(16)"}}
        if i % 2:
            streams[f"S{i}"]["granularity"] = 1e-3
    return Catalog.from_dict({"streams": streams})


def generated_queries(n: int, n_streams: int = 6, seed: int = 1) -> list[dict]:
    """Selections, aggregates and 2-4 stream chain joins, windows and models mixed."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        names = rng.sample([f"S{j}" for j in range(n_streams)], rng.choice([1, 1, 2, 3, 4]))
        window = rng.choice(WINDOWS)
        tail = "" if window else " WINDOW [1]"
        sources = ", ".join(s + window for s in names)
        s = names[0]
        if len(names) == 1:
            sql = rng.choice([
                f"SELECT {s}.a, {s}.b FROM {sources} WHERE {s}.c = {rng.randint(1, 9)}",
                f"SELECT {s}.a FROM {sources} WHERE {s}.d > {rng.randint(1, 9)} AND {s}.b <= 5",
                f"SELECT {s}.a, COUNT(*) FROM {sources} WHERE {s}.b < 5 GROUP BY {s}.a",
                f"SELECT {s}.a, {s}.tag FROM {sources}"])
        else:
            preds = [f"{a}.a = {b}.b" for a, b in zip(names, names[1:])]
            if rng.random() < 0.5:
                preds.append(f"{s}.c = 3")
            columns = "*" if rng.random() < 0.3 else ", ".join(f"{n}.a" for n in names)
            sql = f"SELECT {columns} FROM {sources} WHERE {' AND '.join(preds)}"
        query = {"name": f"g{i}", "sql": sql + tail, "k": rng.choice([3, 5, 6])}
        if rng.random() < 0.3:
            query["model"] = "pipes"
        out.append(query)
    return out


@pytest.fixture(scope="module")
def dec(examples) -> Catalog:
    return load_catalog(examples / "dec-pkt.toml")


@pytest.fixture(scope="module")
def example_specs(examples, dec):
    """The example workload's chart specs, with overrides such as ``k=3``."""
    workload = load_workload(examples / "workload.toml")
    return lambda **overrides: [s for s, _ in workload_specs(workload, dec, overrides)]


def extra_workload() -> dict:
    """A 3-axis join chart (with a jsel axis), PIPES charts, a k=1 chart."""
    q1 = "SELECT TCP.src_host, TCP.dest_host FROM TCP WHERE TCP.dest_host = 2 WINDOW [1]"
    q2 = ("SELECT * FROM TCP, UDP, SF WHERE TCP.src_host = UDP.dest_host "
          "AND UDP.dest_host = SF.dest_host WINDOW [1]")
    join = ("SELECT TCP.src_host, UDP.bytes FROM TCP [RANGE 10 SECONDS], UDP [ROWS 200] "
            "WHERE TCP.src_host = UDP.dest_host AND TCP.bytes > 100")
    return {"query": [
        {"name": "three_axes", "sql": join, "k": 7,
         "axes": ["rate.TCP", "rate.UDP", "jsel.TCP.UDP"],
         "ranges": {"jsel.TCP.UDP": [0.001, 0.2]}},
        {"name": "pipes_sel", "sql": q1, "model": "pipes", "k": 12},
        {"name": "pipes_join", "sql": q2, "model": "pipes", "k": 6},
        {"name": "k_one", "sql": q2, "k": 1},
        {"name": "k_one_sel", "sql": q1, "k": 1, "weights": [0.1, 0.9, 0.5],
         "memory_unit": "tuples"},
    ]}


def assert_identical(local: list[Chart], spark: list[Chart], catalog: Catalog) -> None:
    assert [c.spec for c in spark] == [c.spec for c in local]
    for a, b in zip(local, spark):
        assert b.plan_ids == a.plan_ids, a.spec.name
        assert b.plan_explains == a.plan_explains, a.spec.name
        assert b.plan_index.dtype == a.plan_index.dtype and b.plan_index.shape == a.spec.shape
        assert np.array_equal(b.plan_index, a.plan_index), a.spec.name
        # Spark returns plan indices only; the costs worked out from them are the local
        # build's, bitwise: the same elementwise kernel on the same centroids (inf included).
        assert b.cost is None
        cost = winning_costs(ChartContext(a.spec, catalog).with_plans(list(a.plans)),
                             b.plan_index)
        assert cost.dtype == np.float64 and cost.tobytes() == a.cost.tobytes(), a.spec.name
        assert b.seconds > 0


def test_example_workload(example_specs, spark, dec):
    specs = example_specs()
    charts = build_spark(specs, dec, spark=spark, progress=False)
    assert [c.spec.name for c in charts] == ["Q1", "Q2"]
    assert [c.plan_index.shape for c in charts] == [(10, 10), (10, 10, 10)]
    assert_identical(build_local(specs, dec, progress=False), charts, dec)


def test_three_axes_pipes_and_k_one(spark, dec):
    specs = [s for s, _ in workload_specs(workload_from_dict(extra_workload()), dec)]
    assert [s.shape for s in specs] == [(7, 7, 7), (12, 12), (6, 6, 6), (1, 1, 1), (1, 1)]
    charts = build_spark(specs, dec, spark=spark, progress=False)
    assert_identical(build_local(specs, dec, progress=False), charts, dec)
    assert charts[0].plans_used >= 1 and charts[3].plan_index.size == 1


def test_generated_workload_in_many_small_blocks(spark, monkeypatch):
    """Blocks of 97 cells: most straddle two charts, and every task holds one."""
    catalog = generated_catalog()
    specs = [s for s, _ in workload_specs(
        workload_from_dict({"query": generated_queries(20)}), catalog)]
    assert {s.model for s in specs} == {"om", "pipes"}
    assert {len(s.axes) for s in specs} >= {2, 3, 4}
    monkeypatch.setattr(chart_build, "MIN_BLOCK_CELLS", 97)
    monkeypatch.setattr(chart_build, "MAX_BLOCK_CELLS", 97)
    charts = build_spark(specs, catalog, spark=spark, progress=False)
    assert_identical(build_local(specs, catalog, progress=False), charts, catalog)
    assert spark.range(3).count() == 3  # the caller's session is still running


def test_jobs_in_one_session_do_not_share_cached_contexts(example_specs, spark, dec):
    """Python workers outlive a job; chart 0 of the next job is another chart."""
    first, second = example_specs(k=4), example_specs(k=5)[::-1]
    assert_identical(build_local(first, dec, progress=False),
                     build_spark(first, dec, spark=spark, progress=False), dec)
    assert_identical(build_local(second, dec, progress=False),
                     build_spark(second, dec, spark=spark, progress=False), dec)


def test_scratch_directory_is_cleaned_up(example_specs, spark, dec, tmp_path):
    build_spark(example_specs(k=3), dec, spark=spark, progress=False, scratch=tmp_path)
    assert list(tmp_path.iterdir()) == []
    assert build_spark([], dec, spark=spark) == []


def test_bad_query_fails_on_the_driver(example_specs, spark, dec):
    specs = example_specs(k=2)
    bad = dataclasses.replace(specs[0], sql="SELECT nope FROM TCP WINDOW [1]")
    with pytest.raises(CqoptError):
        build_spark([bad], dec, spark=spark, progress=False)


def _block_payload(specs, dec, size):
    contexts = [chart_build.ChartContext(s, dec) for s in specs]
    offsets = chart_build._offsets(specs)
    return {"job": f"test-{size}", "offsets": offsets.tolist(), "block": size,
            "plan_dtype": chart_build._plan_dtype(contexts).str,
            "contexts": [c.to_bytes() for c in contexts]}, int(offsets[-1])


def test_task_costs_blocks_from_the_shipped_plans_without_spark(example_specs, dec,
                                                                monkeypatch):
    """The mapInArrow function: blocks out of order, straddling charts, an empty batch;
    the task never parses or enumerates a query, it receives the plans."""
    specs = example_specs(k=3)  # 9 + 27 cells
    payload, total = _block_payload(specs, dec, size=5)
    assert payload["plan_dtype"] == "|u1"  # one byte a cell
    n_blocks = -(-total // 5)

    def no_planning(*args, **kwargs):
        raise AssertionError("a task enumerated plans")

    monkeypatch.setattr("cqopt.charts.kernel.candidate_plans", no_planning)
    order = np.random.default_rng(0).permutation(n_blocks)
    batches = [pa.RecordBatch.from_arrays([pa.array(part, pa.int64())], names=["id"])
               for part in np.array_split(order, [0, 2, 5])]
    out = pa.Table.from_batches(list(chart_build._cost_blocks(payload, iter(batches))))
    assert out.schema.names == ["block", "plan"]  # plan indices only: one byte a cell
    assert [str(t) for t in out.schema.types] == ["int64", "binary"]
    plan = chart_build._place(out, specs, total, 5, np.dtype(np.uint8))
    monkeypatch.undo()
    local = build_local(specs, dec, progress=False)
    assert np.array_equal(plan, np.concatenate([c.plan_index.ravel() for c in local]))


def test_every_block_once_whole_or_a_clear_error(example_specs, dec):
    specs = example_specs(k=2)  # 4 + 8 cells, blocks of 5: 0-4, 5-9, 10-11
    payload, total = _block_payload(specs, dec, size=5)

    def table(blocks, cut=None):
        batches = [pa.RecordBatch.from_arrays([pa.array(blocks, pa.int64())], names=["id"])]
        out = pa.Table.from_batches(list(chart_build._cost_blocks(payload, iter(batches))))
        if cut is not None:
            plans = out.column("plan").to_pylist()
            plans[cut] = plans[cut][:-1]
            out = out.set_column(1, "plan", pa.array(plans, pa.binary()))
        return out

    plan = chart_build._place(table([2, 0, 1]), specs, total, 5, np.dtype(np.uint8))
    assert plan.shape == (12,) and plan.dtype == np.uint8
    with pytest.raises(SparkBuildError, match=r"2 blocks for 3: 1 missing, 0 duplicated, "
                                              r"first block 2 \(chart 'Q2'\).*scratch="):
        chart_build._place(table([0, 1]), specs, total, 5, np.dtype(np.uint8))
    with pytest.raises(SparkBuildError, match=r"1 missing, 1 duplicated, first block 0 "
                                              r"\(chart 'Q1'\)"):
        chart_build._place(table([0, 0, 2]), specs, total, 5, np.dtype(np.uint8))
    with pytest.raises(SparkBuildError, match="block 3, outside the charts' 3 blocks"):
        chart_build._place(table([0, 1, 2]).set_column(
            0, "block", pa.array([0, 1, 3], pa.int64())), specs, total, 5, np.dtype(np.uint8))
    with pytest.raises(SparkBuildError, match="block 1 holds 4 plans for 5 cells"):
        chart_build._place(table([0, 1, 2], cut=1), specs, total, 5, np.dtype(np.uint8))


def test_blocks_are_few_per_core_and_bounded():
    assert chart_build._block_size(1100, 2) == chart_build.MIN_BLOCK_CELLS
    assert chart_build._block_size(10**6, 2) == 250_000  # 2 tasks a core
    assert chart_build._block_size(10**8, 2) == chart_build.MAX_BLOCK_CELLS
    assert chart_build._block_size(10**7, 1000) == chart_build.MIN_BLOCK_CELLS
    assert chart_build._plan_dtype([SimpleNamespace(plans=range(257))]) \
        == np.uint16


def test_one_session_per_process(spark):
    with pytest.raises(SparkBuildError, match=r"already running in this process; pass it as "
                                              r"spark="):
        spark_session("local[1]")


def test_a_conf_set_aside_for_driver_tuples_is_said(spark):
    """A --conf of a key that jobs over driver tuples set (DRIVER_DATA_CONF) is said at
    the start, with the value those jobs run with; other keys pass without a word."""
    lines = []
    with running_session(progress=lines.append, conf={
            "spark.sql.shuffle.partitions": "8", "spark.sql.ansi.enabled": "true"}):
        pass
    said = [line for line in lines if "collected to the driver" in line]
    assert len(said) == 1, lines
    assert "--conf spark.sql.shuffle.partitions=8" in said[0]
    assert "spark.sql.shuffle.partitions=1" in said[0]
    assert "ansi" not in said[0]
    lines.clear()
    with running_session(progress=lines.append, conf={"spark.sql.ansi.enabled": "true"}):
        pass
    assert not [line for line in lines if "collected to the driver" in line], lines


def test_missing_java_is_a_clear_error(monkeypatch):
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.delenv("PYSPARK_GATEWAY_PORT", raising=False)
    monkeypatch.setattr(shutil, "which", lambda name, *a, **k: None)
    with pytest.raises(CqoptError, match=r"Spark needs Java 17 or newer on the PATH; found no "
                                         r"java executable on the PATH; install a JDK 17\+ "
                                         r"\(e\.g\. apt-get install openjdk-17-jre-headless\)"):
        check_java()
    with pytest.raises(CqoptError, match="Spark needs Java 17 or newer"):
        spark_session("local[1]")  # before any JVM is started


@pytest.mark.parametrize("banner, found", [
    ('java version "1.8.0_292"\nJava(TM) SE Runtime Environment', "is Java 8"),
    ('openjdk version "11.0.21" 2023-10-17', "is Java 11"),
    ("Error: could not find libjava.so", "did not report a version"),
])
def test_old_or_broken_java_is_a_clear_error(monkeypatch, tmp_path, banner, found):
    java = tmp_path / "bin" / "java"
    java.parent.mkdir()
    java.write_text(f"#!/bin/sh\ncat >&2 <<'EOF'\n{banner}\nEOF\n")
    java.chmod(0o755)
    monkeypatch.setenv("JAVA_HOME", str(tmp_path))
    with pytest.raises(SparkBuildError, match=f"Java 17 or newer.*{found}"):
        check_java()


def test_installed_java_passes():
    if shutil.which("java") is None:
        pytest.skip("no java on the PATH")
    assert check_java() >= 17


def test_shipped_function_carries_the_plans_and_stays_small(example_specs, dec):
    """What mapInArrow pickles: a module function, the plans themselves, no SQL to parse."""
    from pyspark import cloudpickle

    specs = example_specs(k=2)
    payload, _ = _block_payload(specs, dec, size=5)
    blob = cloudpickle.dumps(functools.partial(chart_build._cost_blocks, payload))
    assert len(blob) < 40_000
    shipped = cloudpickle.loads(blob).args[0]
    assert [[p.id for p in chart_build.ChartContext.from_bytes(c).plans]
            for c in shipped["contexts"]] == \
        [[p.id for p in chart_build.ChartContext(s, dec).plans] for s in specs]


def test_unreadable_result_names_the_shared_scratch(example_specs, spark, dec, monkeypatch):
    """Executors on other machines write to their own disks: say what to do about it."""
    import pyarrow.parquet as pq

    def no_files(*args, **kwargs):
        raise pa.ArrowInvalid("No match for FieldRef.Name(chart)")

    monkeypatch.setattr(pq, "read_table", no_files)
    with pytest.raises(SparkBuildError, match="cannot read the Spark job's result in .*"
                                              "pass scratch= a directory the driver and every "
                                              "executor share"):
        build_spark(example_specs(k=2), dec, spark=spark, progress=False)


def test_bad_model_settings_fail_on_the_driver_as_locally(example_specs, spark, dec):
    spec = dataclasses.replace(example_specs(k=2)[0], model="pipes", memory_unit="tuples")
    with pytest.raises((ValueError, CqoptError)) as local:
        build_local([spec], dec, progress=False)
    with pytest.raises(type(local.value), match="PIPES model counts memory in bytes only"):
        build_spark([spec], dec, spark=spark, progress=False)


# -- Spark's failures reach users as CqoptErrors ------------------------------------------
def test_bogus_master_is_a_one_line_cli_error(examples, repo_root, tmp_path):
    """In a subprocess: this process's test session must not meet a second SparkContext."""
    out = tmp_path / "charts"
    run = subprocess.run(
        [sys.executable, "-m", "cqopt", "build", "--catalog", str(examples / "dec-pkt.toml"),
         "--workload", str(examples / "workload.toml"), "--out", str(out),
         "--master", "bogus://x"],
        cwd=repo_root, capture_output=True, text=True,
        timeout=120)
    assert run.returncode == 2, run.stderr
    # Refused as the command line is read, before Spark starts.
    assert run.stderr.startswith("cqopt: error: argument --master: not a Spark master URL: "
                                 "'bogus://x'; expected local"), run.stderr
    assert run.stderr.count("\n") == 1
    assert "Traceback" not in run.stderr and not out.exists()


def test_bogus_master_fails_before_any_jvm(example_specs, spark, dec):
    # Checked before the one-session rule: no Spark is touched.
    with pytest.raises(SparkBuildError, match=r"'bogus://x': not a master URL Spark knows"):
        spark_session("bogus://x")
    with pytest.raises(SparkBuildError, match="'mesos://x'.*check the master URL"):
        build_spark(example_specs(k=2), dec, master="mesos://x", progress=False)


def test_failing_start_up_is_a_build_error(monkeypatch):
    """What getOrCreate raises when the JVM cannot start, without starting one."""
    from pyspark import SparkContext
    from pyspark.errors import PySparkRuntimeError
    from pyspark.sql import SparkSession

    def exits(self):
        raise PySparkRuntimeError(errorClass="JAVA_GATEWAY_EXITED", messageParameters={})

    monkeypatch.setenv("PYSPARK_GATEWAY_PORT", "0")  # skips the java check
    monkeypatch.setattr(SparkContext, "_active_spark_context", None)
    monkeypatch.setattr(SparkSession.Builder, "getOrCreate", exits)
    with pytest.raises(SparkBuildError, match=r"Spark could not start with master "
                                              r"'spark://nowhere:7077': \[JAVA_GATEWAY_EXITED\] "
                                              r"Java gateway process exited.*; check the master "
                                              r"URL and that its cluster is up"):
        spark_session("spark://nowhere:7077")


def test_executor_that_cannot_unpack_the_plans_is_a_build_error(example_specs, spark, dec,
                                                                monkeypatch):
    """An executor running another cqopt fails the job with a clear error."""
    monkeypatch.setattr(chart_build.ChartContext, "to_bytes", lambda self: b"not a pickle")
    with pytest.raises(SparkBuildError, match=r"the Spark job building the charts failed: "
                                              r".*cannot unpack a chart's context sent by the "
                                              r"driver .*must run the driver's cqopt version"):
        build_spark(example_specs(k=2), dec, spark=spark, progress=False)
    assert spark.range(3).count() == 3  # the session survives the failed job


def test_spark_errors_keeps_the_useful_line():
    from py4j.protocol import Py4JError
    from pyspark.errors import PySparkValueError

    with pytest.raises(SparkBuildError, match=r"^doing x: \[CANNOT_BE_NONE\] .*; try y$"):
        with spark_errors("doing x", hint="; try y"):
            raise PySparkValueError(errorClass="CANNOT_BE_NONE",
                                    messageParameters={"arg_name": "a"})
    with pytest.raises(CqoptError, match=r"^gone: Error while sending or receiving$"):
        with spark_errors("gone", CqoptError):
            raise Py4JError("Error while sending or receiving\nmore detail")
    with pytest.raises(ZeroDivisionError):  # not Spark's: left alone
        with spark_errors("x"):
            1 / 0
