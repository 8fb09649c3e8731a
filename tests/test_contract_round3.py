"""The user's contract, third audit: no user file overwritten by any command, no hang on a
FIFO or device, no traceback, every check before Spark starts, and nonsense refused."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import cqopt.charts as charts
from cqopt.cli.main import main
from cqopt.output import MARKER, OutputError, recover, staged_directory
from cqopt.spark import calibrate as cal


def _error(capsys, code: int) -> str:
    """The one error line of a refused command (exit 2, no traceback)."""
    captured = capsys.readouterr()
    assert code == 2, captured
    assert captured.err.startswith("cqopt: error: ") and captured.err.count("\n") == 1, \
        captured.err
    assert "Traceback" not in captured.err
    return captured.err


def _cli(*args: str, timeout: float = 120, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cqopt", *args], capture_output=True,
                          text=True, timeout=timeout, **kw)


@pytest.fixture(scope="module")
def chart_set(dec_toml, workload_toml, tmp_path_factory):
    out = tmp_path_factory.mktemp("round3") / "charts"
    assert main(["build", "--catalog", dec_toml, "--workload", workload_toml, "--out",
                 str(out), "--engine", "local", "--k", "3", "--quiet"]) == 0
    return out


@pytest.fixture
def no_spark(monkeypatch):
    """calibrate's Spark parts replaced: the command's own checks and writes, no JVM."""
    rates = {"selection_equality": 2e7, "selection_range": 1.5e7, "projection": 3e7,
             "equi_join": 4e6, "aggregate": 1e7}

    def measure(spark, catalog, max_rows, sizes, repeats, say):
        rows = [max_rows >> i for i in reversed(range(sizes))]
        return {kind: [(n, 0.08 + n / rate) for n in rows] for kind, rate in rates.items()}

    monkeypatch.setattr(cal, "measure", measure)
    monkeypatch.setattr(cal, "describe_spark", lambda spark: "Spark test")
    monkeypatch.setattr("cqopt.spark.session.running_session",
                        lambda master, progress, conf=None: contextlib.nullcontext(None))


# -- data lost or overwritten ---------------------------------------------------------------
def test_show_never_overwrites_a_users_file_or_writes_through_a_link(chart_set, tmp_path,
                                                                     capsys):
    photo = tmp_path / "photo.png"
    photo.write_bytes(b"\x89PNG\r\n\x1a\nmy holiday")
    show = ["show", "--charts", str(chart_set), "--query", "Q1", "--out"]
    err = _error(capsys, main([*show, str(photo)]))
    assert "cqopt did not write it" in err and "choose another --out" in err
    assert photo.read_bytes() == b"\x89PNG\r\n\x1a\nmy holiday"
    doc = tmp_path / "doc.txt"
    doc.write_text("my thesis")
    (tmp_path / "doc.png").symlink_to(doc)
    err = _error(capsys, main([*show, str(tmp_path / "doc.png")]))
    assert "symbolic link" in err and doc.read_text() == "my thesis"
    # An image cqopt wrote is replaced (a rerun); once edited, it is the user's.
    ours = tmp_path / "q1.svg"
    assert main([*show, str(ours)]) == 0 and main([*show, str(ours)]) == 0
    ours.write_bytes(ours.read_bytes().replace(b"<svg", b"<svg data-mine='1'", 1))
    capsys.readouterr()
    assert "did not write it" in _error(capsys, main([*show, str(ours)]))
    assert b"data-mine" in ours.read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["doc.png", "doc.txt", "photo.png",
                                                          "q1.svg"]


@pytest.mark.parametrize("target", ["/proc/version.png", "/sys/x.png"])
def test_show_into_a_folder_it_cannot_write_is_one_line(chart_set, capsys, target):
    if not Path(target).parent.is_dir():
        pytest.skip(f"no {Path(target).parent} here")
    err = _error(capsys, main(["show", "--charts", str(chart_set), "--query", "Q1",
                               "--out", target]))
    assert target in err


def test_calibrate_never_overwrites_an_edited_catalog_or_its_own_input(no_spark, dec_toml,
                                                                       tmp_path, capsys):
    out = tmp_path / "cal.toml"
    calibrate = ["calibrate", "--catalog", dec_toml, "--rows", "8000", "--quiet", "--out"]
    assert main([*calibrate, str(out)]) == 0 and main([*calibrate, str(out)]) == 0
    edited = out.read_text().replace("[operators]", "[operators]\n# my note", 1)
    out.write_text(edited)
    capsys.readouterr()
    err = _error(capsys, main([*calibrate, str(out)]))
    assert "did not write it (or it was edited since)" in err and out.read_text() == edited
    shutil.copy(out, tmp_path / "again.toml")
    out.write_text(edited.replace("\n# my note", ""))  # the signed text again, unedited
    assert main(["calibrate", "--catalog", str(out), "--rows", "8000", "--quiet",
                 "--out", str(out)]) == 2
    assert "is the file this command reads" in capsys.readouterr().err


def test_calibrate_scratch_is_fresh_and_never_followed(no_spark, dec_toml, tmp_path, capsys):
    out = tmp_path / "cal.toml"
    diary = tmp_path / "diary.txt"
    diary.write_text("dear diary")
    (tmp_path / ".cal.toml.tmp").symlink_to(diary)
    mine = tmp_path / "notes"
    mine.write_text("mine")
    assert main(["calibrate", "--catalog", dec_toml, "--rows", "8000", "--quiet", "--out",
                 str(out)]) == 0
    assert diary.read_text() == "dear diary" and (tmp_path / ".cal.toml.tmp").is_symlink()
    assert not out.is_symlink() and "[operators]" in out.read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == [".cal.toml.tmp", "cal.toml",
                                                          "diary.txt", "notes"]


def test_a_copied_staging_folder_is_not_taken_for_cqopts_scratch(tmp_path):
    out = tmp_path / "o"
    with pytest.raises(RuntimeError):
        with staged_directory(out, kind="chart set") as tmp:
            real = tmp
            (tmp / "half.parquet").write_bytes(b"half")
            shutil.copytree(tmp, tmp_path / ".o.tmp-999998-x")  # the user's copy
            marker = json.loads((tmp / MARKER).read_text())
            raise RuntimeError("stop")
    assert not real.exists()
    copy = tmp_path / ".o.tmp-999998-x"
    body = json.loads((copy / MARKER).read_text())
    (copy / MARKER).write_text(json.dumps({**body, "id": "x"}))
    (copy / "thesis.tex").write_text("mine")
    assert marker["state"] == "staging"
    said = []
    assert recover(out, said.append) == [copy]
    assert (copy / "thesis.tex").read_text() == "mine" and len(said) == 1


def test_force_does_not_replace_another_kind_of_output(chart_set, dec_toml, tmp_path, capsys):
    out = tmp_path / "charts"
    shutil.copytree(chart_set, out)
    err = _error(capsys, main(["generate", "--catalog", dec_toml, "--out", str(out),
                               "--duration", "2", "--force"]))
    assert "is a chart set cqopt wrote, not a trace set" in err
    assert charts.load(out)["Q1"] is not None


@pytest.mark.parametrize("streams,says", [("TCP,TCP", "TCP twice"), ("", "empty stream"),
                                          ("TCP,", "empty stream")])
def test_generate_refuses_a_stream_named_twice_or_empty(dec_toml, tmp_path, capsys, streams,
                                                        says):
    out = tmp_path / "traces"
    err = _error(capsys, main(["generate", "--catalog", dec_toml, "--out", str(out),
                               "--duration", "2", "--streams", streams]))
    assert says in err and not out.exists()


# -- hangs: only regular files are read or replaced ---------------------------------------
def _fifo(tmp_path: Path) -> Path:
    fifo = tmp_path / "fifo.toml"
    os.mkfifo(fifo)
    return fifo


@pytest.mark.parametrize("target", ["fifo", "/dev/zero", "link to /dev/zero"])
def test_calibrate_out_at_a_fifo_or_device_is_refused_at_once(dec_toml, tmp_path, target):
    out = {"fifo": lambda: _fifo(tmp_path), "/dev/zero": lambda: Path("/dev/zero"),
           "link to /dev/zero": lambda: (tmp_path / "z.toml").symlink_to("/dev/zero")
           or tmp_path / "z.toml"}[target]()
    done = _cli("calibrate", "--catalog", dec_toml, "--out", str(out), timeout=60)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "Traceback" not in done.stderr and "starting Spark" not in done.stderr


@pytest.mark.parametrize("where", ["/proc/kmsg", "fifo"])
def test_explain_never_waits_on_a_catalog_that_is_no_regular_file(workload_toml, tmp_path,
                                                                  where):
    catalog = "/proc/kmsg" if where == "/proc/kmsg" else str(_fifo(tmp_path))
    if where == "/proc/kmsg" and not os.path.exists(catalog):
        pytest.skip("no /proc/kmsg here")
    done = _cli("explain", "--catalog", catalog, "--sql",
                "SELECT * FROM TCP [NOW] WHERE TCP.dest_port = 80", timeout=60)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "Traceback" not in done.stderr and catalog in done.stderr


def test_a_trace_that_is_a_fifo_is_refused_not_waited_on(tmp_path):
    from cqopt.replay.trace_format import TraceError, read_trace_frame

    fifo = tmp_path / "TCP.csv"
    os.mkfifo(fifo)
    with pytest.raises(TraceError, match="not a regular file"):
        read_trace_frame(fifo)


# -- tracebacks become one line -----------------------------------------------------------
def test_a_depth_too_deep_to_print_is_refused_in_one_line(dec_toml, workload_toml, tmp_path,
                                                          capsys):
    err = _error(capsys, main(["build", "--catalog", dec_toml, "--workload", workload_toml,
                               "--out", str(tmp_path / "o"), "--engine", "local",
                               "--refine", "8", "--depth", "100000", "--quiet"]))
    assert "depth 100000" in err and "give a depth from 0 to" in err


def test_an_out_name_too_long_for_its_scratch_is_refused_before_any_work(
        dec_toml, workload_toml, tmp_path, capsys):
    for length in (230, 300):
        err = _error(capsys, main(["build", "--catalog", dec_toml, "--workload",
                                   workload_toml, "--out", str(tmp_path / ("a" * length)),
                                   "--engine", "local", "--k", "3", "--quiet"]))
        assert "choose a shorter --out" in err
    assert list(tmp_path.iterdir()) == []


def test_a_deeply_nested_marker_is_refused_not_a_recursion(tmp_path, capsys, dec_toml,
                                                            workload_toml):
    out = tmp_path / "o"
    out.mkdir()
    (out / MARKER).write_text("[" * 200_000)
    err = _error(capsys, main(["build", "--catalog", dec_toml, "--workload", workload_toml,
                               "--out", str(out), "--engine", "local", "--k", "3", "--quiet",
                               "--force"]))
    assert "nested deeper" in err and (out / MARKER).exists()


def _crafted(chart_set, tmp_path, edit=None, text=None) -> Path:
    """A copy of ``chart_set`` whose manifest is ``edit``ed (checksum made valid) or is
    ``text``."""
    from cqopt.charts.store import MANIFEST_CHECKSUM, manifest_checksum

    copy = tmp_path / "crafted"
    shutil.copytree(chart_set, copy)
    if text is None:
        manifest = json.loads((copy / "manifest.json").read_text())
        edit(manifest)
        manifest[MANIFEST_CHECKSUM] = manifest_checksum(manifest)
        text = json.dumps(manifest, allow_nan=True)
    (copy / "manifest.json").write_text(text)
    return copy


def _axis(**values):
    def edit(manifest):
        manifest["queries"]["Q1"]["axes"][0].update(values)
    return edit


def _nested_plans(manifest_dir):
    import hashlib

    def edit(manifest):
        (manifest_dir / "Q1.plans.json").write_text("[" * 200_000)
        manifest["queries"]["Q1"]["plans_sha256"] = hashlib.sha256(
            b"[" * 200_000).hexdigest()
    return edit


def _rename(key, name):
    def edit(manifest):
        entry = manifest["queries"].pop("Q1")
        manifest["queries"][key] = {**entry, "name": name}
    return edit


def _set(field, value, query=True):
    def edit(manifest):
        (manifest["queries"]["Q1"] if query else manifest)[field] = value
    return edit


@pytest.mark.parametrize("case", [
    "nested manifest", "5000 digits", "nested plans", "k overflows", "k infinite",
    "lo 10^400", "format_version true", "k 3.5", "k text", "name differs", "path name",
    "escape name", "unknown axis", "repeated axis", "huge weights"])
def test_a_crafted_manifest_is_one_line_at_load_and_choose(chart_set, tmp_path, capsys, case):
    from cqopt.charts.store import ChartSetError

    crafted = tmp_path / "crafted"
    edits = {
        "nested manifest": dict(text="[" * 200_000),
        "5000 digits": dict(text='{"format": ' + "9" * 5000 + "}"),
        "nested plans": dict(edit=_nested_plans(crafted)),
        "k overflows": dict(edit=lambda m: [m["queries"]["Q1"]["axes"][i].update(k=k)
                                            for i, k in enumerate([2**62 + 25, 4])]),
        "k infinite": dict(edit=_axis(k=float("inf"))),
        "lo 10^400": dict(edit=_axis(lo=10**400)),
        "format_version true": dict(edit=_set("format_version", True, query=False)),
        "k 3.5": dict(edit=_axis(k=3.5)),  # int() would read 3, the data's
        "k text": dict(edit=_axis(k="3")),
        "name differs": dict(edit=_set("name", "Q2")),
        "path name": dict(edit=_rename("../../etc/passwd", "../../etc/passwd")),
        "escape name": dict(edit=_rename("Q\n1\x1b[31m", "Q\n1\x1b[31m")),
        "unknown axis": dict(edit=_axis(statistic="sel.UDP")),
        "repeated axis": dict(edit=_axis(statistic="rate.TCP")),
        "huge weights": dict(edit=_set("weights", [1e308, 1e308])),
    }[case]
    if case == "nested plans":
        shutil.copytree(chart_set, crafted)
        edits = {"edit": edits["edit"]}
        from cqopt.charts.store import MANIFEST_CHECKSUM, manifest_checksum
        manifest = json.loads((crafted / "manifest.json").read_text())
        edits["edit"](manifest)
        manifest[MANIFEST_CHECKSUM] = manifest_checksum(manifest)
        (crafted / "manifest.json").write_text(json.dumps(manifest))
    else:
        crafted = _crafted(chart_set, tmp_path, **edits)
    with pytest.raises(ChartSetError) as info:
        charts.load(crafted)
    assert "\n" not in str(info.value) and "\x1b" not in str(info.value)
    err = _error(capsys, main(["choose", "--charts", str(crafted), "--query", "Q1", "--stat",
                               "sel.TCP=0.1", "--stat", "rate.TCP=100"]))
    assert "\x1b" not in err


@pytest.mark.parametrize("value", ["\u0661\u0660\u0660", "1_00", b"100", True])
def test_the_python_api_reads_statistic_values_as_the_cli_does(chart_set, value):
    from cqopt.errors import CqoptError
    from cqopt.runtime.adaptive import AdaptiveQuery

    chart = charts.load(chart_set)["Q1"]
    with pytest.raises(CqoptError, match="rate.TCP"):
        chart.choose({"sel.TCP": 0.5, "rate.TCP": value})
    with pytest.raises(CqoptError, match="rate.TCP"):
        chart.choose_many({"sel.TCP": [0.5, 0.5], "rate.TCP": [value, value]})
    aq = AdaptiveQuery(charts.load(chart_set), "Q1", estimator="last")
    with pytest.raises(CqoptError, match="rate.TCP"):
        aq.step({"sel.TCP": 0.5, "rate.TCP": value})
    assert chart.choose({"sel.TCP": "0.5", "rate.TCP": 100}).plan_id  # text a user types


def test_an_unknown_statistics_name_is_quoted_without_its_newlines(chart_set):
    from cqopt.errors import CqoptError

    with pytest.raises(CqoptError) as info:
        charts.load(chart_set)["Q1"].choose({"sel.TCP": 0.5, "rate.TCP": 1.0,
                                              "rate\n\x1b[31mX": 1.0})
    assert "\n" not in str(info.value) and "\x1b" not in str(info.value)


# -- checked before Spark starts ----------------------------------------------------------
@pytest.fixture(scope="module")
def tcp_files(dec_toml, tmp_path_factory):
    out = tmp_path_factory.mktemp("round3-traces") / "gen"
    assert main(["generate", "--catalog", dec_toml, "--out", str(out), "--duration", "3",
                 "--file-per-round", "1", "--streams", "TCP", "--format", "parquet"]) == 0
    return out / "TCP"


def _run(dec_toml, workload_toml, chart_set, out, *more) -> list[str]:
    return ["run", "--catalog", dec_toml, "--workload", workload_toml, "--charts",
            str(chart_set), "--query", "Q1", "--out", str(out), "--quiet", *more]


@pytest.mark.parametrize("case", ["rate without a timed trigger", "trigger 1e308",
                                  "trigger 1e-300", "source twice", "source is a chart set",
                                  "empty file", "truncated file", "wrong columns",
                                  "state.json is a list"])
def test_run_refuses_before_spark_starts(no_spark_start, dec_toml, workload_toml, chart_set,
                                         tcp_files, tmp_path, capsys, case):
    source = tmp_path / "TCP"
    shutil.copytree(tcp_files, source)
    good = ["--source", f"TCP={source}"]
    out = tmp_path / "run"
    argv = {
        "rate without a timed trigger": ["--source", "TCP=rate:100"],
        "trigger 1e308": [*good, "--trigger", "1e308"],
        "trigger 1e-300": [*good, "--trigger", "1e-300"],
        "source twice": [*good, "--source", f"tcp={source}"],
        "source is a chart set": ["--source", f"TCP={chart_set}"],
    }.get(case, good)
    if case == "empty file":
        (source / "part-00009.parquet").write_bytes(b"")
    if case == "truncated file":
        data = (source / "part-00000.parquet").read_bytes()
        (source / "part-00009.parquet").write_bytes(data[: len(data) // 2])
    if case == "wrong columns":
        import pyarrow as pa
        import pyarrow.parquet as pq
        pq.write_table(pa.table({"ts": [1.0], "colour": ["red"]}), source / "part-00009.parquet")
    if case == "state.json is a list":
        out.mkdir()
        (out / "state.json").write_text("[]")
    err = _error(capsys, main(_run(dec_toml, workload_toml, chart_set, out, *argv)))
    assert "Spark started" not in err


@pytest.mark.parametrize("case", ["missing", "a folder without traces", "binary", "empty",
                                  "truncated"])
def test_fidelity_refuses_a_bad_trace_before_spark_starts(no_spark_start, dec_toml,
                                                          workload_toml, tcp_files, tmp_path,
                                                          capsys, case):
    trace = {"missing": tmp_path / "missing.parquet", "a folder without traces":
             tmp_path / "adir", "binary": tmp_path / "binary.csv",
             "empty": tmp_path / "empty.parquet", "truncated": tmp_path / "cut.parquet"}[case]
    if case == "a folder without traces":
        trace.mkdir()
        (trace / "notes.md").write_text("mine")
    if case == "binary":
        trace.write_bytes(bytes(range(256)) * 4)
    if case == "empty":
        trace.write_bytes(b"")
    if case == "truncated":
        data = (tcp_files / "part-00000.parquet").read_bytes()
        trace.write_bytes(data[: len(data) - 10])
    err = _error(capsys, main(["fidelity", "--catalog", dec_toml, "--workload", workload_toml,
                               "--out", str(tmp_path / "report"), "--trace", f"TCP={trace}",
                               "--query", "Q1", "--quiet"]))
    assert str(trace) in err and "Spark started" not in err
    assert not (tmp_path / "report").exists()


def test_loading_a_chart_set_leaves_no_arrow_worker_thread_to_abort_the_exit(chart_set):
    """A pool thread alive at exit made 1 of ~100 ``cqopt choose`` runs abort (exit 134,
    "terminate called without an active exception") after printing the right answer."""
    script = ("import os, sys, pyarrow, cqopt.charts as charts\n"
              "count = lambda: len(os.listdir('/proc/self/task'))\n"
              "before = count()\n"
              "charts.load(sys.argv[1]).choose('Q1', {'sel.TCP': 0.1, 'rate.TCP': 100.0})\n"
              "print(before, count())\n")
    if not os.path.isdir("/proc/self/task"):
        pytest.skip("no /proc/self/task to count threads")
    done = subprocess.run([sys.executable, "-c", script, str(chart_set)], capture_output=True,
                          text=True, timeout=120)
    before, after = map(int, done.stdout.split())
    assert done.returncode == 0 and after == before, done.stderr


# -- nonsense refused -----------------------------------------------------------------------
@pytest.mark.parametrize("command", ["build", "choose", "generate", "fidelity", "run"])
def test_an_option_without_its_parent_is_refused(no_spark_start, dec_toml, workload_toml,
                                                 chart_set, tcp_files, tmp_path, capsys,
                                                 command):
    out = str(tmp_path / "out")
    argv, option, parent = {
        "build": (["build", "--catalog", dec_toml, "--workload", workload_toml, "--out", out,
                   "--engine", "local", "--k", "3", "--percentiles", "10,90"],
                  "--percentiles", "--ranges-from"),
        "choose": (["choose", "--charts", str(chart_set), "--query", "Q1", "--stat",
                    "sel.TCP=0.1", "--stat", "rate.TCP=100", "--allow-stale"],
                   "--allow-stale", "--catalog"),
        "generate": (["generate", "--catalog", dec_toml, "--out", out, "--duration", "2",
                      "--offset", "5"], "--offset", "--interarrivals"),
        "fidelity": (["fidelity", "--catalog", dec_toml, "--workload", workload_toml, "--out",
                      out, "--trace", f"TCP={tcp_files}", "--query", "Q1", "--window-min",
                      "0.5"], "--window-min", "--memory-budget"),
        "run": (_run(dec_toml, workload_toml, chart_set, out, "--source", f"TCP={tcp_files}",
                     "--min-kept", "0.5"), "--min-kept", "--deadline"),
    }[command]
    err = _error(capsys, main(argv))
    assert f"{option} is given without {parent}" in err
    assert not os.path.exists(out)


@pytest.mark.parametrize("more", [["--duration", "1e-300"],
                                  ["--duration", "2", "--rate-scale", "TCP=1e-300"]])
def test_generate_refuses_a_trace_of_no_tuple(dec_toml, tmp_path, capsys, more):
    err = _error(capsys, main(["generate", "--catalog", dec_toml, "--out",
                               str(tmp_path / "t"), "--streams", "TCP", *more]))
    assert "not one" in err and not (tmp_path / "t").exists()


@pytest.mark.parametrize("estimator", ["sample:", "sample:1e-300", "sample:\u0661",
                                       "samples", "sample:1_0"])
def test_a_sample_estimator_needs_a_ratio_in_ascii_digits(workload_toml, dec_toml, tmp_path,
                                                          capsys, estimator):
    err = _error(capsys, main(["fidelity", "--catalog", dec_toml, "--workload", workload_toml,
                               "--out", str(tmp_path / "r"), "--traces", str(tmp_path),
                               "--estimator", estimator]))
    assert "sample ratio" in err


def test_a_k_sweep_with_an_empty_item_is_refused(workload_toml, dec_toml, tmp_path, capsys):
    err = _error(capsys, main(["fidelity", "--catalog", dec_toml, "--workload", workload_toml,
                               "--out", str(tmp_path / "r"), "--traces", str(tmp_path),
                               "--k-sweep", "2,,5"]))
    assert "--k-sweep" in err
