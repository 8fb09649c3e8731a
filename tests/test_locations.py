"""Paths and URIs a user gives for sources, traces, run folders and reports.

A ``file:`` URI is a local path; a URI of another file system (``hdfs://``,
``s3a://``) goes to Spark's readers as given where only Spark reads it, and is
refused in one line, before Spark starts, where cqopt itself needs the file.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from cqopt.cli.main import main
from cqopt.errors import CqoptError
from cqopt.location import locate
from cqopt.spark.run.sources import Source
from cqopt.spark.run.settings import StreamingRunError
from cqopt.spark.run.state import check_run_folder
from cqopt.spark.trace_read import report_locations

W = 1.0


@pytest.fixture(scope="module")
def charts(examples, tmp_path_factory) -> Path:
    """The example workload's chart set, built in-process (a fraction of a second)."""
    from cqopt.catalog import load_catalog
    from cqopt.charts.build import build_local
    from cqopt.charts.spec import workload_specs
    from cqopt.charts.store import write_chart_set
    from cqopt.charts.workload import load_workload

    catalog = load_catalog(examples / "dec-pkt.toml")
    specs = workload_specs(load_workload(examples / "workload.toml"), catalog)
    folder = tmp_path_factory.mktemp("locations") / "charts"
    write_chart_set(folder, build_local([s for s, _ in specs], catalog, progress=False),
                    catalog)
    return folder


def tcp_trace() -> pd.DataFrame:
    """Two seconds of TCP at 100 tuples/s, destinations over 5 hosts (Q1 keeps host 2)."""
    from cqopt.catalog import load_catalog
    from cqopt.examples import resolve
    from cqopt.replay.trace_generate import generate_trace

    catalog = load_catalog(resolve("examples/dec-pkt.toml")[0])
    return generate_trace(catalog.stream("TCP"), 2.0, seed=5, mean_rate=100,
                          steady={"dest_host": 5})


def write_rounds(trace: pd.DataFrame, folder: Path) -> Path:
    """One Parquet file per round of W, from 0."""
    from cqopt.replay.trace_write import write_trace_per_round

    write_trace_per_round(trace, folder, W, start=0.0)
    return folder


@pytest.fixture
def no_spark(monkeypatch):
    """Spark must not start: what is refused is refused before it."""
    import cqopt.spark.session

    def refuse(*args, **kwargs):
        raise AssertionError("Spark was started")

    monkeypatch.setattr(cqopt.spark.session, "running_session", refuse)


def one_line_error(argv: list[str], capsys) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("cqopt: error: ") and "\n" not in err and "Traceback" not in err
    return err


# -- the judgement ------------------------------------------------------------------
def test_file_uris_are_local_paths_and_other_schemes_go_to_spark_as_given(tmp_path):
    assert locate(f"file://{tmp_path}/a b").local == tmp_path / "a b"  # file:///abs
    assert locate(f"file:{tmp_path}/a%20b").local == tmp_path / "a b"  # Spark's form
    assert locate(f"FILE://localhost{tmp_path}").local == tmp_path
    assert locate("relative/dir").local == Path.cwd() / "relative" / "dir"
    for uri in ("hdfs://nn:8020/traces/TCP", "s3a://bucket/TCP.parquet", "hdfs:/traces/TCP"):
        where = locate(uri)
        assert where.local is None and where.spark == uri
    # Structured Streaming's FORMAT:OPTIONS is no URI; a file: URI of a host is refused.
    assert locate("kafka:subscribe=t").local == Path.cwd() / "kafka:subscribe=t"
    for bad, said in (("file://tmp/x", "file:///ABSOLUTE/PATH (three slashes)"),
                      ("file:x", "names an absolute path")):
        with pytest.raises(CqoptError, match=said.replace("(", r"\(").replace(")", r"\)")):
            locate(bad)


def test_where_cqopt_needs_a_local_path_another_file_system_is_refused_in_one_line(
        tmp_path):
    for uri in ("hdfs://nn/runs/r1", "s3a://bucket/r1"):
        with pytest.raises(StreamingRunError) as err:
            check_run_folder(uri)
        text = str(err.value)
        assert text.startswith(f"--out {uri}: cqopt writes the run folder") and "\n" not in text
        assert "needs a local path or file:///PATH" in text and "give a local folder" in text
    assert check_run_folder(f"file://{tmp_path}/run") == tmp_path / "run"
    # A source: the run checks and watches its files itself, however the Source is made.
    for make in (lambda: Source.parse("TCP", "hdfs://nn/traces/TCP"),
                 lambda: Source.files("TCP", "s3a://bucket/TCP"),
                 lambda: Source("TCP", "parquet", "hdfs://nn/traces/TCP")):
        with pytest.raises(StreamingRunError) as err:
            make()
        text = str(err.value)
        assert text.startswith("--source TCP=") and "\n" not in text
        assert "reads a directory source's files itself too" in text
        assert "copy the files to a local folder" in text


def test_a_file_uri_source_is_the_same_source_as_its_path(tmp_path):
    folder = write_rounds(tcp_trace(), tmp_path / "TCP")
    by_uri = Source.parse("TCP", f"file://{folder}")
    assert by_uri == Source.parse("TCP", str(folder)) == Source.files("TCP", folder)
    assert by_uri.path == str(folder) and by_uri.kind == "parquet"
    # A relative path is made absolute however the Source is made (Spark's JVM has its
    # own working directory).
    assert Source("TCP", "parquet", "rel").path == str(Path.cwd() / "rel")


def test_a_replay_maps_file_uris_and_hands_other_traces_to_spark(tmp_path):
    def name(key, value):
        return f"--{key} {value}"

    out, traces, folder = report_locations(
        f"file://{tmp_path}/report", {"TCP": f"file://{tmp_path}/TCP.parquet",
                                      "UDP": "hdfs://nn/UDP.parquet"},
        f"file://{tmp_path}", name)
    assert (out, folder) == (tmp_path / "report", tmp_path)
    assert traces == {"TCP": str(tmp_path / "TCP.parquet"), "UDP": "hdfs://nn/UDP.parquet"}
    with pytest.raises(CqoptError, match=r"^--traces hdfs://nn/t: cqopt lists the folder"):
        report_locations(tmp_path, None, "hdfs://nn/t", name)


# -- on the command line: refused before Spark starts ----------------------------------
def test_run_refuses_an_hdfs_out_and_source_before_spark(examples, charts, tmp_path, capsys,
                                                         no_spark):
    folder = write_rounds(tcp_trace(), tmp_path / "TCP")
    args = ["run", "--catalog", str(examples / "dec-pkt.toml"),
            "--workload", str(examples / "workload.toml"), "--charts", str(charts),
            "--query", "Q1", "--quiet"]
    err = one_line_error([*args, "--source", f"TCP={folder}", "--out", "hdfs://nn/runs/r1"],
                         capsys)
    assert "--out hdfs://nn/runs/r1: cqopt writes the run folder" in err
    err = one_line_error([*args, "--source", "TCP=hdfs://nn/TCP", "--out",
                          str(tmp_path / "run")], capsys)
    assert "--source TCP=hdfs://nn/TCP: cqopt run reads a directory source's files" in err
    assert not (tmp_path / "run").exists() and not Path("hdfs:").exists()


def test_fidelity_refuses_an_hdfs_out_before_spark(examples, tmp_path, capsys, no_spark):
    err = one_line_error(["fidelity", "--catalog", str(examples / "dec-pkt.toml"),
                          "--workload", str(examples / "workload.toml"),
                          "--traces", str(tmp_path), "--out", "s3a://bucket/report"], capsys)
    assert "--out s3a://bucket/report: cqopt writes the report itself" in err


# -- one small run: file:// source and out --------------------------------------------
@pytest.mark.spark
@pytest.mark.slow
def test_a_run_from_file_uris_reads_the_files_and_writes_the_folder_they_name(
        spark, examples, charts, tmp_path):
    """Compared row for row with the trace itself (Q1 keeps the tuples to host 2), which
    also says what a run from the plain paths gives, at half the cost of running it."""
    from cqopt.replay.rounds import round_of

    trace = tcp_trace()
    folder = tmp_path / "TCP"
    write_rounds(trace, folder)
    assert main(["run", "--catalog", str(examples / "dec-pkt.toml"),
                 "--workload", str(examples / "workload.toml"), "--charts", str(charts),
                 "--query", "Q1", "--master", "local[2]", "--quiet",
                 "--source", f"TCP=file://{folder}", "--out", f"file://{tmp_path}/run"]) == 0
    assert not Path("file:").exists()
    run = tmp_path / "run"
    assert sorted(p.name for p in (run / "results").iterdir()) == \
        [f"round-{r:06d}.parquet" for r in range(2)]
    rounds = [round_of(t, 0.0, W) for t in trace.ts]
    kept = trace.assign(round=rounds)[trace.dest_host == 2]
    for r in range(2):
        got = pd.read_parquet(run / "results" / f"round-{r:06d}.parquet")
        want = kept[kept["round"] == r][list(got.columns)]
        assert len(want) > 0
        assert sorted(map(tuple, got.itertuples(index=False))) == \
            sorted(map(tuple, want.itertuples(index=False)))
    assert pd.read_csv(run / "rounds.csv")["rows_in:TCP"].tolist() == \
        [rounds.count(r) for r in range(2)]


def test_build_and_generate_write_where_a_file_uri_points_and_refuse_other_schemes(
        examples, tmp_path, capsys, monkeypatch):
    """``--out file:///PATH`` is the folder PATH (never ``./file:``); ``--out hdfs://...``,
    which cqopt cannot write itself, is one line before any work."""
    monkeypatch.chdir(tmp_path)
    assert main(["generate", "--catalog", str(examples / "dec-pkt.toml"), "--duration", "2",
                 "--streams", "TCP", "--out", f"file://{tmp_path}/traces"]) == 0
    assert (tmp_path / "traces" / "TCP.parquet").exists() or list(
        (tmp_path / "traces").glob("TCP*"))
    assert main(["build", "--catalog", str(examples / "dec-pkt.toml"), "--workload",
                 str(examples / "workload.toml"), "--k", "4", "--engine", "local", "--quiet",
                 "--out", f"file://{tmp_path}/charts"]) == 0
    assert (tmp_path / "charts" / "manifest.json").exists()
    assert not Path("file:").exists()
    capsys.readouterr()
    for command in (["generate", "--catalog", str(examples / "dec-pkt.toml"), "--duration",
                     "2", "--out", "hdfs://nn/traces"],
                    ["build", "--catalog", str(examples / "dec-pkt.toml"), "--workload",
                     str(examples / "workload.toml"), "--out", "hdfs://nn/charts"]):
        err = one_line_error(command, capsys)
        assert "--out hdfs://nn/" in err and "needs a local path or file:///PATH" in err
    assert not Path("hdfs:").exists()
