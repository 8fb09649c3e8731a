"""The registry of trace formats (replay/trace_format.py and one module per format): every
reader and writer of traces asks it, so a format registered here is read everywhere."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from cqopt.catalog import load_catalog
from cqopt.cli.main import main
from cqopt.replay.trace_format import (
    BUILTIN_MODULES,
    StreamSource,
    TraceError,
    TraceFormat,
    detect_trace_format,
    read_trace_frame,
    register_trace_format,
    trace_format,
    trace_formats,
    trace_reader,
    trace_stem,
    unregister_trace_format,
)
from cqopt.replay.trace_generate import generate_trace, load_interarrivals
from cqopt.replay.trace_write import write_trace


def read_psv(path: Path) -> pd.DataFrame:
    return pd.read_csv(path, sep="|")


def write_psv(frame: pd.DataFrame, path: Path) -> None:
    frame.to_csv(path, sep="|", index=False)


@pytest.fixture
def psv():
    """A toy format, pipe-separated values, registered for one test: what a format's own
    module would hold (its name in BUILTIN_MODULES being the second file). Spark streams it
    through its CSV source."""
    fmt = register_trace_format(TraceFormat(
        "psv", (".psv",), read_psv, write_psv, description="pipe-separated values",
        stream=StreamSource("csv", (("header", "true"), ("sep", "|"),
                                    ("enforceSchema", "false")))))
    yield fmt
    unregister_trace_format("psv")


def test_the_builtin_formats_each_come_from_one_module():
    formats = trace_formats()
    assert {"dec", "csv", "parquet"} <= set(formats)  # a format added later is no failure
    assert {f"cqopt.replay.trace_{name}" for name in ("dec", "csv", "parquet")} \
        <= set(BUILTIN_MODULES)
    for module in BUILTIN_MODULES:  # each built-in module registers its own format
        name = module.removeprefix("cqopt.replay.trace_")
        fmt = formats[name]
        assert fmt.read.__module__ == fmt.write.__module__ == module


@pytest.mark.parametrize("name, fmt", [("dec-pkt-1.tcp.gz", "dec"), ("S.TXT", "dec"),
                                       ("a.csv.gz", "csv"), ("b.pq", "parquet"),
                                       ("part-0.snappy.parquet", "parquet")])
def test_detection_by_name(name, fmt):
    assert trace_format(name) == fmt == detect_trace_format(name).name


def test_detection_of_a_directory_of_parts(tmp_path):
    frame = pd.DataFrame({"ts": [0.5], "a": [1]})
    parts = tmp_path / "TCP"
    parts.mkdir()
    for name in ("part-0.csv", "part-1.csv.gz"):
        write_trace(frame, parts / name)
    (parts / "_SUCCESS").touch()  # Spark's marker, not a trace file
    assert trace_format(parts) == "csv"
    write_trace(frame, parts / "part-2.parquet")
    with pytest.raises(TraceError, match=r"TCP: holds trace files of 2 formats \(csv, parquet\)"):
        trace_format(parts)
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "notes.md").touch()
    with pytest.raises(TraceError, match=r"empty: holds no trace file \(1 other entries\)"):
        trace_format(empty)


def test_unknown_and_undetectable_formats_are_one_line_errors():
    with pytest.raises(TraceError, match=r"x.csv: unknown trace format 'parqet'; use one of "
                                         r"[^;]+; did you mean 'parquet'\?") as refused:
        trace_format("x.csv", "parqet")
    listed = str(refused.value).split("use one of ")[1].split(";")[0].split(", ")
    assert {"dec", "csv", "parquet"} <= set(listed)
    with pytest.raises(TraceError, match=r"x.data: cannot tell the trace format .*pass fmt="):
        trace_format("x.data")


def test_pure_python_read_and_write_round_trip(tmp_path):
    frame = pd.DataFrame({"ts": [0.5, 1.25], "src_host": [1, 2], "dest_host": [3, 4],
                          "src_port": [5, 6], "dest_port": [7, 8], "bytes": [9, 10]})
    for name in ("t.dec", "t.csv", "t.csv.gz", "t.parquet"):
        back = read_trace_frame(write_trace(frame, tmp_path / name))
        pd.testing.assert_frame_equal(back, frame, check_dtype=False)


def test_a_broken_file_reads_as_a_trace_error(tmp_path):
    path = tmp_path / "t.parquet"
    path.write_bytes(b"not parquet at all")
    with pytest.raises(TraceError, match=r"t.parquet: not a readable parquet file"):
        read_trace_frame(path)
    with pytest.raises(TraceError, match="no such file"):
        read_trace_frame(tmp_path / "none.csv")


def test_a_registered_format_is_written_named_and_read_everywhere(psv, tmp_path):
    frame = pd.DataFrame({"ts": [0.0, 0.5, 2.0], "a": [1, 2, 3]})
    path = write_trace(frame, tmp_path / "TCP.psv")
    assert path.read_text().splitlines() == ["ts|a", "0.0|1", "0.5|2", "2.0|3"]
    assert trace_format(path) == "psv" and trace_stem("TCP.psv") == "TCP"
    pd.testing.assert_frame_equal(read_trace_frame(path), frame)
    # the generator's reader of real arrivals reads it too
    np.testing.assert_array_equal(load_interarrivals(path), [0.5, 1.5])
    assert trace_reader("psv", "spark") is None  # Spark reads it through pandas
    parts = tmp_path / "UDP"  # a directory of parts, read in name order
    write_trace(frame[2:], parts / "part-1.psv")
    write_trace(frame[:2], parts / "part-0.psv")
    pd.testing.assert_frame_equal(read_trace_frame(parts), frame)
    with pytest.raises(ValueError, match="'psv' is registered already"):
        register_trace_format(psv)


def test_unregistering_forgets_the_format(psv):
    unregister_trace_format("psv")
    assert "psv" not in trace_formats() and trace_stem("TCP.psv") is None


def test_a_registered_format_works_for_generate_fidelity_and_run(psv, dec_toml, workload_toml,
                                                                 spark, tmp_path, capsys):
    """The toy format goes every command's whole way, with no code of its own but the
    format: generated (one file, and one file per round), found in --traces by its name,
    read by Spark (through its pandas reader), replayed; and streamed by cqopt run."""
    traces = tmp_path / "traces"
    assert main(["generate", "--catalog", dec_toml, "--out", str(traces), "--streams", "TCP",
                 "--duration", "30", "--rate-scale", "TCP=0.2", "--format", "psv"]) == 0
    assert [p.name for p in traces.iterdir() if not p.name.startswith(".")] == ["TCP.psv"]
    capsys.readouterr()
    assert main(["fidelity", "--catalog", dec_toml, "--workload", workload_toml,
                 "--traces", str(traces), "--query", "Q1", "--out", str(tmp_path / "report"),
                 "--k-sweep", "none", "--json", "--quiet"]) == 0
    table = json.loads(capsys.readouterr().out)["queries"]
    assert set(table) == {"Q1"}
    assert table["Q1"]["rounds"] == 29  # 30 s in 1-second rounds, the last one dropped

    rounds = tmp_path / "rounds"
    assert main(["generate", "--catalog", dec_toml, "--out", str(rounds), "--streams", "TCP",
                 "--duration", "3", "--rate-scale", "TCP=0.2", "--format", "psv",
                 "--file-per-round", "1"]) == 0
    parts = sorted((rounds / "TCP").glob("part-*.psv"))
    assert [p.name for p in parts] == ["part-00000.psv", "part-00001.psv", "part-00002.psv"]
    assert main(["build", "--catalog", dec_toml, "--workload", workload_toml, "--out",
                 str(tmp_path / "charts"), "--engine", "local", "--k", "3", "--quiet"]) == 0
    assert main(["run", "--catalog", dec_toml, "--workload", workload_toml, "--charts",
                 str(tmp_path / "charts"), "--query", "Q1", "--source",
                 f"TCP={rounds / 'TCP'}", "--out", str(tmp_path / "run"), "--quiet"]) == 0
    log = pd.read_csv(tmp_path / "run" / "rounds.csv")
    assert log["round"].tolist() == [0, 1, 2]
    assert log["rows_in:TCP"].tolist() == [len(read_psv(p)) for p in parts]
