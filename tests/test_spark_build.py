"""The Spark engine builds the very charts the local engine builds."""

from __future__ import annotations

import dataclasses
import functools
import random
import shutil
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pytest

from cqopt.catalog import Catalog, load_catalog
from cqopt.charts.build import build_local
from cqopt.charts.kernel import Chart
from cqopt.charts.spec import workload_specs
from cqopt.charts.workload import load_workload, workload_from_dict
from cqopt.errors import CqoptError
from cqopt.spark import chart_build
from cqopt.spark.chart_build import ARROW_BATCH, build_spark
from cqopt.spark.session import SparkBuildError, check_java, spark_errors, spark_session


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


def assert_identical(local: list[Chart], spark: list[Chart]) -> None:
    assert [c.spec for c in spark] == [c.spec for c in local]
    for a, b in zip(local, spark):
        assert b.plan_ids == a.plan_ids, a.spec.name
        assert b.plan_explains == a.plan_explains, a.spec.name
        assert b.plan_index.dtype == a.plan_index.dtype and b.plan_index.shape == a.spec.shape
        assert np.array_equal(b.plan_index, a.plan_index), a.spec.name
        # Bitwise: the same elementwise kernel on the same centroids (inf included).
        assert b.cost.dtype == np.float64 and b.cost.tobytes() == a.cost.tobytes(), a.spec.name
        assert b.seconds > 0


def test_example_workload(example_specs, spark, dec):
    specs = example_specs()
    charts = build_spark(specs, dec, spark=spark, progress=False)
    assert [c.spec.name for c in charts] == ["Q1", "Q2"]
    assert [c.plan_index.shape for c in charts] == [(10, 10), (10, 10, 10)]
    assert_identical(build_local(specs, dec, progress=False), charts)


def test_three_axes_pipes_and_k_one(spark, dec):
    specs = [s for s, _ in workload_specs(workload_from_dict(extra_workload()), dec)]
    assert [s.shape for s in specs] == [(7, 7, 7), (12, 12), (6, 6, 6), (1, 1, 1), (1, 1)]
    charts = build_spark(specs, dec, spark=spark, progress=False)
    assert_identical(build_local(specs, dec, progress=False), charts)
    assert charts[0].plans_used >= 1 and charts[3].plan_index.size == 1


def test_generated_workload_in_many_partitions_and_batches(spark, monkeypatch):
    """Small partitions and Arrow batches: charts straddle batches and tasks."""
    catalog = generated_catalog()
    specs = [s for s, _ in workload_specs(
        workload_from_dict({"query": generated_queries(20)}), catalog)]
    assert {s.model for s in specs} == {"om", "pipes"}
    assert {len(s.axes) for s in specs} >= {2, 3, 4}
    monkeypatch.setattr(chart_build, "MIN_PARTITION_CELLS", 100)
    monkeypatch.setattr(chart_build, "CHUNK_CELLS", 37)
    before = spark.conf.get(ARROW_BATCH)
    charts = build_spark(specs, catalog, spark=spark, progress=False)
    assert_identical(build_local(specs, catalog, progress=False), charts)
    assert spark.conf.get(ARROW_BATCH) == before  # the caller's session is left as it was
    assert spark.range(3).count() == 3  # and still running


def test_jobs_in_one_session_do_not_share_cached_contexts(example_specs, spark, dec):
    """Python workers outlive a job; chart 0 of the next job is another chart."""
    first, second = example_specs(k=4), example_specs(k=5)[::-1]
    assert_identical(build_local(first, dec, progress=False),
                     build_spark(first, dec, spark=spark, progress=False))
    assert_identical(build_local(second, dec, progress=False),
                     build_spark(second, dec, spark=spark, progress=False))


def test_scratch_directory_is_cleaned_up(example_specs, spark, dec, tmp_path):
    build_spark(example_specs(k=3), dec, spark=spark, progress=False, scratch=tmp_path)
    assert list(tmp_path.iterdir()) == []
    assert build_spark([], dec, spark=spark) == []


def test_bad_query_fails_on_the_driver(example_specs, spark, dec):
    specs = example_specs(k=2)
    bad = dataclasses.replace(specs[0], sql="SELECT nope FROM TCP WINDOW [1]")
    with pytest.raises(CqoptError):
        build_spark([bad], dec, spark=spark, progress=False)


def test_kernel_function_on_mixed_batches_without_spark(example_specs, dec):
    """The mapInArrow function: batches mixing charts, out of order, or empty."""
    specs = example_specs(k=3)
    contexts = [chart_build.ChartContext(s, dec) for s in specs]
    offsets = chart_build._offsets(specs)
    payload = {"job": "test", "offsets": offsets.tolist(),
               "specs": [s.to_dict() for s in specs], "catalog": dec.to_dict(),
               "plan_ids": [[p.id for p in c.plans] for c in contexts]}
    ids = np.random.default_rng(0).permutation(int(offsets[-1]))
    batches = [pa.RecordBatch.from_arrays([pa.array(part)], names=["id"])
               for part in np.array_split(ids, [0, 5, 30])]
    out = pa.Table.from_batches(list(chart_build._cost_batches(payload, iter(batches))))
    assert out.schema.names == ["chart", "cell", "plan", "cost"]
    assert [str(t) for t in out.schema.types] == ["int32", "int64", "int32", "double"]
    plan, cost = chart_build._place(out, specs, offsets)
    local = build_local(specs, dec, progress=False)
    assert np.array_equal(plan, np.concatenate([c.plan_index.ravel() for c in local]))
    assert cost.tobytes() == np.concatenate([c.cost.ravel() for c in local]).tobytes()


def test_every_cell_once_or_a_clear_error(example_specs, dec):
    specs = example_specs(k=2)  # 4 + 8 cells
    offsets = chart_build._offsets(specs)

    def table(chart, cell):
        n = len(chart)
        return pa.table({"chart": pa.array(chart, pa.int32()), "cell": pa.array(cell, pa.int64()),
                         "plan": pa.array([0] * n, pa.int32()),
                         "cost": pa.array([1.0] * n, pa.float64())})

    full = ([0] * 4 + [1] * 8, list(range(4)) + list(range(8)))
    plan, cost = chart_build._place(table(*full), specs, offsets)
    assert plan.shape == cost.shape == (12,)
    missing = (full[0][:-1], full[1][:-1])
    with pytest.raises(SparkBuildError, match=r"1 cells missing, 0 duplicated, first in "
                                              r"chart 'Q2' cell 7.*scratch="):
        chart_build._place(table(*missing), specs, offsets)
    twice = (full[0][:-1] + [0], full[1][:-1] + [2])
    with pytest.raises(SparkBuildError, match="1 cells missing, 1 duplicated, first in "
                                              "chart 'Q1' cell 2"):
        chart_build._place(table(*twice), specs, offsets)
    with pytest.raises(SparkBuildError, match="rows outside the charts, e.g. chart 0 cell 4"):
        chart_build._place(table([0], [4]), specs, offsets)
    with pytest.raises(SparkBuildError, match="outside the charts, e.g. chart 2"):
        chart_build._place(table([2], [0]), specs, offsets)


def test_partition_count_is_bounded():
    assert chart_build._partitions(1100, 2) == 1
    assert chart_build._partitions(10**8, 2) == 8
    assert chart_build._partitions(10**8, 1000) == 3052


def test_one_session_per_process(spark):
    with pytest.raises(SparkBuildError, match=r"already running in this process; pass it as "
                                              r"spark="):
        spark_session("local[1]")


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


def test_shipped_function_is_plain_data(example_specs, dec):
    """What mapInArrow pickles: a module function and a payload of JSON-able data."""
    import json

    from pyspark import cloudpickle

    specs = example_specs(k=2)
    payload = {"job": "x", "offsets": chart_build._offsets(specs).tolist(),
               "specs": [s.to_dict() for s in specs], "catalog": dec.to_dict(),
               "plan_ids": [[]]}
    json.dumps(payload)
    blob = cloudpickle.dumps(functools.partial(chart_build._cost_batches, payload))
    assert len(blob) < 20_000


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
    assert run.stderr.startswith("cqopt: error: Spark could not start with master "
                                 "'bogus://x': not a master URL Spark knows; check the master "
                                 "URL: local[*]"), run.stderr
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


def test_executor_plan_mismatch_is_a_build_error(example_specs, spark, dec, monkeypatch):
    """An executor enumerating other plans than the driver fails the job with a clear error."""
    real = chart_build.ChartContext

    def reordered(spec, catalog):  # only the driver's contexts: executors import their own
        context = real(spec, catalog)
        context.plans = context.plans[::-1]
        return context

    monkeypatch.setattr(chart_build, "ChartContext", reordered)
    specs = example_specs(k=2)
    with pytest.raises(SparkBuildError, match=r"the Spark job building the charts failed: "
                                              r"SparkBuildError: chart 'Q1': this executor's "
                                              r"plans .* differ from the driver's"):
        build_spark(specs, dec, spark=spark, progress=False)
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
