"""A user's files are sacred: --force replaces only what cqopt wrote (the files its
marker's inventory lists, with their bytes unchanged), atomically, and leaves nothing
behind; anything else inside or beside the output is kept and named; a chart set's
manifest is checked by its own checksum; a run killed at any moment leaves the previous
output or the new one, never neither."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import cqopt.charts as charts
from cqopt.charts.store import ChartSetError, read_manifest
from cqopt.cli.main import main
from cqopt.output import MARKER, OutputError, check_writable, recover, staged_directory


def _cli(*args: str, env: dict | None = None, cwd: Path | None = None
         ) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cqopt", *args], capture_output=True,
                          text=True, env={**os.environ, **(env or {})}, cwd=cwd, timeout=300)


def _build_args(dec_toml, workload_toml, out, *more) -> list[str]:
    return ["build", "--catalog", dec_toml, "--workload", workload_toml, "--out", str(out),
            "--engine", "local", "--k", "3", "--quiet", *more]


def test_force_refuses_a_directory_cqopt_did_not_write(dec_toml, workload_toml, tmp_path,
                                                       capsys):
    mine = tmp_path / "thesis"
    mine.mkdir()
    (mine / "chapter1.tex").write_text("precious")
    assert main(_build_args(dec_toml, workload_toml, mine, "--force")) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "only output cqopt wrote" in err and "chapter1.tex" in err
    assert (mine / "chapter1.tex").read_text() == "precious"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["thesis"]


def test_root_home_and_current_directory_are_refused_outright(tmp_path, monkeypatch):
    home = tmp_path / "home"
    (home / "work").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(home / "work")
    for path, why in [("/", "root directory"), (home, "home directory"),
                      (home / "work", "current directory"), (".", "current directory"),
                      (tmp_path, "holds your home directory")]:
        with pytest.raises(OutputError, match=why):
            check_writable(Path(path), force=True)
    # a marker does not make them replaceable
    (home / MARKER).write_text('{"format": "cqopt-output"}')
    with pytest.raises(OutputError, match="home directory"):
        check_writable(home, force=True)


def test_repeated_force_leaves_nothing_behind(tmp_path):
    out = tmp_path / "report"
    for run in range(5):
        with staged_directory(out, force=run > 0, kind="report") as tmp:
            (tmp / "report.md").write_text(f"run {run}")
    assert (out / "report.md").read_text() == "run 4"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report"]


def test_a_failed_write_keeps_the_previous_output_and_leaves_nothing(tmp_path):
    out = tmp_path / "traces"
    with staged_directory(out, kind="trace set") as tmp:
        (tmp / "TCP.csv").write_text("old")
    with pytest.raises(RuntimeError):
        with staged_directory(out, force=True, kind="trace set") as tmp:
            (tmp / "TCP.csv").write_text("half")
            raise RuntimeError("disk full")
    assert (out / "TCP.csv").read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["traces"]


@pytest.mark.parametrize("swap", ["exchange", "renames"])
def test_killed_at_the_swap_leaves_a_whole_output_and_the_next_run_works(
        dec_toml, workload_toml, tmp_path, swap):
    out = tmp_path / "charts"
    assert _cli(*_build_args(dec_toml, workload_toml, out)).returncode == 0
    before = read_manifest(out)["created"]
    env = {"CQOPT_SWAP_HOOK": "kill", **({"CQOPT_SWAP": "renames"} if swap == "renames" else {})}
    killed = _cli(*_build_args(dec_toml, workload_toml, out, "--force", "--k", "4"), env=env)
    assert killed.returncode == -signal.SIGKILL
    # Either set, whole: exchanged (the new one), or between the two renames (load
    # puts the previous one back).
    loaded = charts.load(out)
    k = loaded["Q1"].spec.axes[0].k
    assert k == (4 if swap == "exchange" else 3)
    if swap == "renames":
        assert read_manifest(out)["created"] == before
    again = _cli(*_build_args(dec_toml, workload_toml, out, "--force", "--k", "5"))
    assert again.returncode == 0, again.stderr
    assert charts.load(out)["Q1"].spec.axes[0].k == 5
    assert sorted(p.name for p in tmp_path.iterdir()) == ["charts"]


@pytest.mark.slow
@pytest.mark.parametrize("command", ["build", "generate",
                                     pytest.param("fidelity", marks=pytest.mark.spark)])
def test_killed_at_random_moments_leaves_previous_or_new(dec_toml, workload_toml, tmp_path,
                                                        tmp_path_factory, command):
    out = tmp_path / "out"
    kills, latest = 4, 2.5
    if command == "build":
        args = _build_args(dec_toml, workload_toml, out)
    elif command == "generate":
        args = ["generate", "--catalog", dec_toml, "--out", str(out), "--duration", "20"]
    else:  # a report: Spark reads the traces, so a run takes seconds; fewer, later kills
        inputs = tmp_path_factory.mktemp("fidelity-inputs")
        assert _cli("generate", "--catalog", dec_toml, "--out", str(inputs / "traces"),
                    "--duration", "20").returncode == 0
        assert _cli(*_build_args(dec_toml, workload_toml, inputs / "charts")).returncode == 0
        args = ["fidelity", "--catalog", dec_toml, "--workload", workload_toml, "--charts",
                str(inputs / "charts"), "--traces", str(inputs / "traces"), "--out", str(out),
                "--k-sweep", "none", "--master", "local[1]", "--quiet"]
        kills, latest = 2, 20.0

    def complete() -> bool:
        if command == "build":
            charts.load(out)
            return True
        names = sorted(p.name for p in out.iterdir() if p.name != MARKER)
        if command == "generate":
            return names == ["SF.parquet", "TCP.parquet", "UDP.parquet"]
        return {"report.md", "report.html", "summary.json"} <= set(names) and \
            set(json.loads((out / "summary.json").read_text())["queries"]) == {"Q1", "Q2"}

    done = _cli(*args)
    assert done.returncode == 0, done.stderr
    rng = random.Random(7)
    for _ in range(kills):
        process = subprocess.Popen([sys.executable, "-m", "cqopt", *args, "--force"],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(0.2, latest))
        process.send_signal(signal.SIGKILL)
        process.wait()
        assert complete()  # never neither
    assert _cli(*args, "--force").returncode == 0
    assert complete()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


@pytest.fixture(scope="module")
def small_set(dec_catalog, tmp_path_factory):
    from cqopt.charts.build import build_local
    from cqopt.charts.spec import workload_specs
    from cqopt.charts.store import write_chart_set
    from cqopt.charts.workload import load_workload
    from cqopt.examples import example

    specs = [s for s, _ in workload_specs(load_workload(example("workload.toml")),
                                          dec_catalog, {"k": 3})]
    out = tmp_path_factory.mktemp("set") / "charts"
    write_chart_set(out, build_local(specs, dec_catalog, progress=False), dec_catalog)
    return out


def test_no_single_bit_flip_in_the_manifest_loads_silently(small_set, tmp_path):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(small_set, copy)
    original = (small_set / "manifest.json").read_bytes()
    reference = json.loads(original)
    rng = random.Random(11)
    accepted = 0
    for _ in range(300):
        flipped = bytearray(original)
        i = rng.randrange(len(flipped))
        flipped[i] ^= 1 << rng.randrange(8)
        (copy / "manifest.json").write_bytes(bytes(flipped))
        try:
            manifest = read_manifest(copy)
        except ChartSetError:
            continue
        accepted += 1  # only a flip JSON does not see (whitespace) may pass
        assert manifest == reference
    assert accepted < 30


def test_a_chart_set_from_before_the_manifest_checksum_is_refused_with_rebuild(small_set,
                                                                                 tmp_path):
    import shutil

    old = tmp_path / "old"
    shutil.copytree(small_set, old)
    manifest = json.loads((old / "manifest.json").read_text())
    del manifest["manifest_sha256"]
    (old / "manifest.json").write_text(json.dumps(manifest))
    (old / MARKER).unlink()
    with pytest.raises(ChartSetError, match="rebuild it with cqopt build"):
        charts.load(old)
    # Without its marker nothing tells its files from a user's: --force refuses it and
    # says how to remove it by hand.
    with pytest.raises(OutputError, match="no .cqopt marker.*remove it by hand"):
        check_writable(old, force=True)


# -- the inventory decides (issue 23, finding 1) --------------------------------------
def test_force_refuses_a_users_folder_holding_a_copied_manifest(dec_toml, workload_toml,
                                                                tmp_path, capsys):
    built = tmp_path / "built"
    assert main(_build_args(dec_toml, workload_toml, built)) == 0
    mine = tmp_path / "project"
    mine.mkdir()
    (mine / "main.py").write_text("print('mine')")
    (mine / "thesis.tex").write_text("precious")
    (mine / "manifest.json").write_bytes((built / "manifest.json").read_bytes())
    capsys.readouterr()
    assert main(_build_args(dec_toml, workload_toml, mine, "--force")) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("cqopt: error:") and "marker" in err
    assert sorted(p.name for p in mine.iterdir()) == ["main.py", "manifest.json", "thesis.tex"]


def test_force_keeps_a_users_file_inside_the_output_and_says_so(dec_toml, workload_toml,
                                                               tmp_path, capsys):
    out = tmp_path / "cs"
    assert main(_build_args(dec_toml, workload_toml, out)) == 0
    (out / "NOTES.txt").write_text("my notes")
    capsys.readouterr()
    assert main(_build_args(dec_toml, workload_toml, out, "--force", "--k", "4")) == 0
    err = capsys.readouterr().err
    assert (out / "NOTES.txt").read_text() == "my notes"
    assert charts.load(out)["Q1"].spec.axes[0].k == 4
    kept = [line for line in err.splitlines() if "kept" in line]
    assert len(kept) == 1 and "NOTES.txt" in kept[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cs"]
    # The user's file is not cqopt's in the new output either: it stays on the next --force.
    assert main(_build_args(dec_toml, workload_toml, out, "--force")) == 0
    assert (out / "NOTES.txt").read_text() == "my notes"


def test_force_keeps_a_folder_beside_the_output_that_only_looks_like_a_leftover(
        dec_toml, workload_toml, tmp_path, capsys):
    out = tmp_path / "cs"
    assert main(_build_args(dec_toml, workload_toml, out)) == 0
    for name in (".cs.old-999999-mine", ".cs.tmp-999999-x"):
        (tmp_path / name / "previous").mkdir(parents=True)
        (tmp_path / name / "previous" / "data.csv").write_text("mine")
    # even one holding a marker: nothing ties it to a write of cqopt's
    (tmp_path / ".cs.tmp-999999-x" / MARKER).write_text(
        json.dumps({"format": "cqopt-output", "version": 2, "state": "staging", "id": "other"}))
    capsys.readouterr()
    assert main(_build_args(dec_toml, workload_toml, out, "--force")) == 0
    err = capsys.readouterr().err
    for name in (".cs.old-999999-mine", ".cs.tmp-999999-x"):
        assert (tmp_path / name / "previous" / "data.csv").read_text() == "mine"
    kept = [line for line in err.splitlines() if "kept" in line]
    assert len(kept) == 1 and ".cs.old-999999-mine" in kept[0] and "remove it by hand" in kept[0]


def test_force_refuses_when_a_file_cqopt_wrote_was_changed(tmp_path):
    out = tmp_path / "report"
    with staged_directory(out, kind="report") as tmp:
        (tmp / "report.md").write_text("cqopt's")
    (out / "report.md").write_text("edited by hand")
    with pytest.raises(OutputError, match="changed since cqopt wrote them.*report.md"):
        check_writable(out, force=True)
    with pytest.raises(OutputError):
        with staged_directory(out, force=True, kind="report") as tmp:
            (tmp / "report.md").write_text("new")
    assert (out / "report.md").read_text() == "edited by hand"


@pytest.mark.parametrize("swap", ["exchange", "renames"])
def test_force_removes_only_inventoried_files_and_keeps_the_rest(tmp_path, monkeypatch, swap):
    if swap == "renames":
        monkeypatch.setenv("CQOPT_SWAP", "renames")
    out = tmp_path / "report"
    with staged_directory(out, kind="report") as tmp:
        (tmp / "figures").mkdir()
        (tmp / "figures" / "a.png").write_bytes(b"png")
        (tmp / "report.md").write_text("one")
    (out / "figures" / "mine.svg").write_text("a user's figure")
    (out / "drafts").mkdir()
    (out / "drafts" / "todo.md").write_text("a user's folder")
    said = []
    with staged_directory(out, force=True, kind="report", say=said.append) as tmp:
        (tmp / "report.md").write_text("two")
    assert (out / "report.md").read_text() == "two"
    assert not (out / "figures" / "a.png").exists()  # cqopt's, and not written again
    assert (out / "figures" / "mine.svg").read_text() == "a user's figure"
    assert (out / "drafts" / "todo.md").read_text() == "a user's folder"
    assert len(said) == 1 and "figures/mine.svg" in said[0] and "drafts" in said[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report"]


def test_an_output_of_an_older_cqopt_without_an_inventory_is_refused(tmp_path):
    out = tmp_path / "traces"
    out.mkdir()
    (out / "TCP.csv").write_text("ts\n1\n")
    (out / MARKER).write_text('{"format": "cqopt-output", "kind": "trace set"}\n')
    with pytest.raises(OutputError, match=r"older cqopt.*rm -r"):
        check_writable(out, force=True)
    assert (out / "TCP.csv").exists()


def test_a_leftover_is_removed_only_when_its_marker_proves_cqopt_made_it(tmp_path):
    out = tmp_path / "cs"
    ours = tmp_path / ".cs.tmp-999999-abc123"  # a killed writer's staging folder
    ours.mkdir()
    (ours / "half.parquet").write_bytes(b"half")
    (ours / MARKER).write_text(json.dumps({"format": "cqopt-output", "version": 2,
                                           "state": "staging", "id": "abc123",
                                           "folder": os.lstat(ours).st_ino}))
    forged = tmp_path / ".cs.tmp-999998-zzz"
    forged.mkdir()
    (forged / "thesis.tex").write_text("mine")
    (forged / MARKER).write_text(json.dumps({"format": "cqopt-output", "version": 2,
                                             "state": "staging", "id": "abc123",
                                             "folder": os.lstat(ours).st_ino}))
    said = []
    kept = recover(out, said.append)
    assert not ours.exists()
    assert kept == [forged] and (forged / "thesis.tex").read_text() == "mine"
    assert len(said) == 1 and ".cs.tmp-999998-zzz" in said[0]


def test_show_makes_no_folder_for_its_image(small_set, tmp_path, capsys):
    target = tmp_path / "nonexistent" / "dir" / "x.png"
    assert main(["show", "--charts", str(small_set), "--query", "Q1", "--out",
                 str(target)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "does not exist" in err
    assert not (tmp_path / "nonexistent").exists()


def test_a_directory_finished_elsewhere_is_adopted_by_the_same_rules(tmp_path):
    from cqopt.output import adopt_directory

    out = tmp_path / "round-0"
    for run, rows in enumerate((b"first", b"second")):
        scratch = tmp_path / f".spark-{run}"
        scratch.mkdir()
        (scratch / "part-0.parquet").write_bytes(rows)
        if run:
            (out / "NOTES.txt").write_text("mine")
        said = []
        adopt_directory(scratch, out, force=run > 0, kind="round result", say=said.append)
    assert (out / "part-0.parquet").read_bytes() == b"second"
    assert (out / "NOTES.txt").read_text() == "mine" and "NOTES.txt" in said[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["round-0"]
    stranger = tmp_path / "stranger"
    stranger.mkdir()
    with pytest.raises(OutputError, match="pass --force"):
        adopt_directory(stranger, out, kind="round result")
    assert stranger.is_dir()  # refused before anything moved
