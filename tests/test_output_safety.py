"""A user's files are sacred: --force replaces only what cqopt wrote, atomically, and
leaves nothing behind; a chart set's manifest is checked by its own checksum; a run
killed at any moment leaves the previous output or the new one, never neither."""

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
from cqopt.charts.staging import MARKER, OutputError, check_writable, staged_directory
from cqopt.charts.store import ChartSetError, read_manifest
from cqopt.cli.main import main


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
@pytest.mark.parametrize("command", ["build", "generate", "fidelity"])
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
    # and cqopt recognises it as its own: --force may replace it
    check_writable(old, force=True)
