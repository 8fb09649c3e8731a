"""cqopt run on live file sources: a file still being written when Spark lists it is read
whole, and a source directory must hold its own stream's files only.

Q1 of the example workload (one stream, W = 1 s) over a few seconds of a generated
TCP trace, as in tests/test_streaming.py.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from cqopt.catalog import load_catalog
from cqopt.charts.spec import workload_specs
from cqopt.charts.workload import load_workload
from cqopt.cli.main import main
from cqopt.replay.rounds import round_of
from cqopt.replay.trace_generate import generate_trace
from cqopt.spark.run.files import FileLedger, csv_remainder

W = 1.0


@pytest.fixture(scope="module")
def setting(examples, tmp_path_factory):
    import cqopt.charts as charts
    from cqopt.charts.build import build_local
    from cqopt.charts.store import write_chart_set

    catalog = load_catalog(examples / "dec-pkt.toml")
    specs = workload_specs(load_workload(examples / "workload.toml"), catalog)
    folder = tmp_path_factory.mktemp("live")
    write_chart_set(folder / "charts", build_local([s for s, _ in specs], catalog,
                                                   progress=False), catalog)
    trace = generate_trace(catalog.stream("TCP"), 5.5, seed=4, mean_rate=300)
    return {"catalog": catalog, "query": dict((s.name, q) for s, q in specs)["Q1"],
            "charts": charts.load(folder / "charts"), "folder": folder,
            "trace": trace.sort_values("ts", ignore_index=True)}


def _ledger_names(out: Path) -> set[str]:
    try:
        state = json.loads((out / "state.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return set()
    return {Path(p).name for p in state.get("files", {})}


@pytest.mark.spark
@pytest.mark.slow
def test_a_file_written_in_two_halves_is_read_whole(spark, setting, tmp_path):
    """Each round's CSV file lands half-written; Spark reads the half; the run reads the
    rest before the round closes: every round holds every one of its tuples."""
    from cqopt.spark.run import AdaptiveRun, RunSettings, Source

    trace = setting["trace"]
    start = float(trace.ts.min())
    rounds = np.array([round_of(t, start, W) for t in trace.ts])
    source, out = tmp_path / "TCP", tmp_path / "run"
    source.mkdir()
    header = ",".join(trace.columns) + "\n"
    failures: list[str] = []

    def write() -> None:  # as a slow cp does: half a file, a pause, the rest
        for r in range(int(rounds.max()) + 1):
            lines = trace[rounds == r].to_csv(header=False, index=False).splitlines(True)
            path = source / f"part-{r:05d}.csv"
            with open(path, "w", encoding="utf-8") as fh:
                fh.write(header + "".join(lines[: len(lines) // 2]))
            waited = time.monotonic()
            while path.name not in _ledger_names(out):  # Spark has read the half
                if time.monotonic() - waited > 120:
                    failures.append(f"{path.name} was never read")
                    return
                time.sleep(0.2)
            with open(path, "a", encoding="utf-8") as fh:
                fh.write("".join(lines[len(lines) // 2:]))

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    assert _wait_for_file(source)  # a source directory must hold a file to be one
    run = AdaptiveRun(spark, "Q1", setting["query"], setting["charts"]["Q1"],
                      setting["catalog"], {"TCP": Source.files("TCP", source)}, out,
                      RunSettings(window_s=W, trigger=1.0, max_rounds=4),
                      progress=lambda _: None)
    result = run.run()
    writer.join(timeout=5)
    assert not failures
    expected = [int((rounds == r).sum()) for r in range(4)]
    assert result.rounds["round"].tolist() == [0, 1, 2, 3]
    assert result.rounds["rows_in:TCP"].tolist() == expected
    # the second half of each file run was read by cqopt, not by Spark's listing
    assert result.summary["recovered_tuples"] >= sum(e - e // 2 for e in expected)
    assert result.summary["changed_files"] == []


def _wait_for_file(folder: Path) -> bool:
    waited = time.monotonic()
    while not any(folder.iterdir()):
        if time.monotonic() - waited > 30:
            return False
        time.sleep(0.05)
    return True


def test_the_ledger_finds_a_grown_file_and_its_whole_new_lines(tmp_path):
    path = tmp_path / "part-00000.csv"
    path.write_text("ts,a\n1,2\n2,3\n")
    ledger = FileLedger()
    ledger.record("TCP", f"file:{path}", size=path.stat().st_size, rows=2)
    assert ledger.grown() == []
    with open(path, "a") as fh:
        fh.write("3,4\n4,")  # a line and half of another
    (growth,) = ledger.grown()
    assert (growth.rows_read, growth.size_now) == (2, path.stat().st_size)
    lines, end = csv_remainder(path, growth.rows_read)
    assert lines == ["3,4"]
    ledger.recovered(growth, len(lines), end)
    assert ledger.grown()[0].rows_read == 3  # the half line is still to come
    # A resumed run reads the ledger back as it was written.
    again = FileLedger(json.loads(json.dumps(ledger.to_json())))
    assert again.files[str(path)].rows == 3


def test_a_settled_file_leaves_the_ledger_unless_lines_were_recovered_from_it(tmp_path):
    """A file long unchanged is no longer looked at, and the ledger (the run's state, saved
    every batch) forgets it, so it does not grow by every file a long run reads; one whose
    grown lines were read stays, so a replayed batch does not read them twice."""
    import os

    from cqopt.spark.run.files import SETTLE_SECONDS

    plain, grew, moved = (tmp_path / f"part-{i}.csv" for i in range(3))
    ledger = FileLedger()
    for path in (plain, grew, moved):
        path.write_text("ts,a\n1,2\n")
        ledger.record("TCP", f"file:{path}", size=path.stat().st_size, rows=1)
    with open(grew, "a") as fh:
        fh.write("2,3\n")
    (growth,) = ledger.grown()
    ledger.recovered(growth, 1, grew.stat().st_size)
    moved.unlink()
    later = max(p.stat().st_mtime for p in (plain, grew)) + SETTLE_SECONDS + 1
    os.utime(plain, (later - 2 * SETTLE_SECONDS,) * 2)
    assert ledger.grown(now=later) == []
    assert list(ledger.files) == [str(grew)] and ledger.files[str(grew)].settled
    assert ledger.files[str(grew)].rows == 2
    ledger.record("TCP", f"file:{plain}", size=plain.stat().st_size, rows=1)  # replayed
    assert ledger.files[str(plain)].rows == 1 and not ledger.files[str(plain)].settled


def test_a_trace_set_folder_given_as_one_streams_source_is_refused(
        setting, examples, tmp_path, capsys):
    """A trace set holds TCP.csv, UDP.csv and SF.csv; as --source TCP it would run every
    stream's tuples as TCP's. Refused before Spark starts, naming the other files."""
    folder = tmp_path / "traces"
    folder.mkdir()
    for stream in ("TCP", "UDP", "SF"):
        setting["trace"].head(5).to_csv(folder / f"{stream}.csv", index=False)
    code = main(["run", "--catalog", str(examples / "dec-pkt.toml"), "--workload",
                 str(examples / "workload.toml"), "--charts", str(setting["folder"] / "charts"),
                 "--query", "Q1", "--source", f"TCP={folder}", "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert code == 2
    assert "holds files of other streams" in err and "UDP.csv" in err and "SF.csv" in err
    assert not (tmp_path / "run").exists()


def test_resuming_removes_only_the_runs_own_scratch(tmp_path):
    """A resumed run clears what a killed one left half-written, by the names it makes
    itself: a user's ``results/.tmp-user-note.txt`` stays."""
    from cqopt.spark.run.sink import clear_scratch

    results = tmp_path / "results"
    (results / ".tmp-round-000001.parquet").mkdir(parents=True)
    (results / ".tmp-round-000001.parquet" / "part-0.parquet").write_bytes(b"half")
    (results / ".tmp-user-note.txt").write_text("mine")
    (results / ".tmp-user-folder").mkdir()
    pending = tmp_path / "pending"  # a stage written from the driver, killed mid-write
    pending.mkdir()
    (pending / ".batch-000004.k2x9_q.tmp").write_bytes(b"half")
    (pending / ".batch-notes.tmp").write_text("mine")
    (pending / "batch-000003").write_bytes(b"a whole stage")
    clear_scratch(tmp_path)
    assert sorted(p.name for p in results.iterdir()) == [".tmp-user-folder",
                                                          ".tmp-user-note.txt"]
    assert sorted(p.name for p in pending.iterdir()) == [".batch-notes.tmp", "batch-000003"]


def test_a_result_killed_before_its_switch_is_cleared_on_resumption(tmp_path):
    """Killed between naming a finished result as the switch's scratch and the switch,
    the leftover carries a marker that proves it is cqopt's: the resumed run removes it."""
    import subprocess
    import sys

    from cqopt.spark.run.sink import clear_scratch

    results = tmp_path / "results"
    (results / "done").mkdir(parents=True)
    (results / "done" / "part-0.parquet").write_bytes(b"rows")
    script = (  # the process dies right after the finished folder takes a scratch's name
        "import os, sys; from pathlib import Path; import cqopt.output as o\n"
        "out = Path(sys.argv[1]) / 'round-000001.parquet'\n"
        "real = os.rename\n"
        "def rename(a, b):\n"
        "    real(a, b); os._exit(9)\n"
        "os.rename = rename\n"
        "o.adopt_directory(Path(sys.argv[1]) / 'done', out, force=True)\n")
    child = subprocess.run([sys.executable, "-c", script, str(results)], capture_output=True)
    assert child.returncode == 9, child.stderr
    leftovers = [p.name for p in results.iterdir()]
    assert len(leftovers) == 1 and leftovers[0].startswith(".round-000001.parquet.tmp-")
    clear_scratch(tmp_path)
    assert list(results.iterdir()) == []
