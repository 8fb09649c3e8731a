"""Every ``--help`` example runs as written, from an empty folder, in any order.

The examples are read from the help texts themselves (:data:`cqopt.cli.main.EXAMPLES`),
so an example that changes is the one that runs. They run in an empty temporary
folder: ``examples/dec-pkt.toml`` there is the bundled example (said on stderr),
and every output lands under ``out/``. An example that reads another's output says
so in its help ("run cqopt build's example first"); the test runs the commands in
the reverse of the order a user would follow, so every such note is needed, and
runs what a note names first, as a user reading it would: ``build`` writes the
charts that ``choose``, ``show``, ``fidelity`` and ``run`` read, ``generate`` the
traces ``explain --analyze`` and ``fidelity`` read, and ``run`` the run
``calibrate --from-run`` fits.

One example runs smaller than written: ``calibrate``'s operator timing, whose
defaults (four sizes up to 16 million rows, three runs each) take about five
minutes on two cores, runs with :data:`SMALLER` appended; everything else of it
(reading the catalog, timing every operator kind on Spark, fitting, writing the
catalog) runs as written. At that size Spark's per-job cost can hide an
operator's own time, which calibrate refuses in one line ("pass a larger
--rows"): that refusal is accepted for this example alone. A fit that cannot be
trusted (too few timings, a negative constant, a held-out error over 30%) is
refused in one line that says what to run instead, and writes nothing: for
calibrate's examples that refusal is accepted too, since a 20-round run on a
busy test machine may not give a trustworthy fit.
"""

from __future__ import annotations

import re
import shlex

import pytest

from cqopt.cli.main import EXAMPLES, main

# Commands in the order their examples depend on each other; each example of a
# command runs when its inputs exist (explain's second example reads traces).
SMALLER = {("calibrate", "--out"): ["--rows", "2000000", "--sizes", "3", "--repeats", "1"]}
ORDER = ("build", "choose", "show", "generate", "explain", "fidelity", "run", "calibrate")


def example_lines(text: str) -> list[list[str]]:
    """Each ``cqopt ...`` command of a help example, continuation lines joined, as argv."""
    commands, current = [], None
    for line in text.splitlines():
        line = line.strip()
        if current is not None:
            current += " " + line.rstrip("\\").strip()
            if not line.endswith("\\"):
                commands.append(current)
                current = None
        elif line.startswith("cqopt "):
            if line.endswith("\\"):
                current = line.rstrip("\\").strip()
            else:
                commands.append(line)
    return [shlex.split(command)[1:] for command in commands]


def test_every_command_has_an_example_in_the_order():
    assert set(ORDER) == set(EXAMPLES)
    assert all(example_lines(text) for text in EXAMPLES.values())


def needs(text: str) -> list[str]:
    """The commands whose examples an example says to run first ("run cqopt build's
    example first"), from the lines of its help before its commands."""
    header = text.split("\n  cqopt ", 1)[0]
    return re.findall(r"cqopt (\w+)'s", header)


# The options whose values are paths an example writes, or reads (a STREAM=PATH for --source).
WRITES = ("--out",)
READS = ("--charts", "--traces", "--analyze", "--from-run", "--source")


def paths(argv: list[str], names: tuple[str, ...]) -> list[str]:
    return [value.partition("=")[2] if name == "--source" else value
            for name, value in zip(argv, argv[1:]) if name in names]


def test_examples_write_under_out_and_name_the_examples_they_read(repo_root):
    """Every output is under out/, which no folder of the source tree is (``--out charts``
    in the repository's root was its charts/ package); every path an example reads that
    it does not write itself is written by an example its help names."""
    assert not (repo_root / "out").is_dir() or not any((repo_root / "out").glob("*.py"))
    written = {command: [p for argv in example_lines(text) for p in paths(argv, WRITES)]
               for command, text in EXAMPLES.items()}
    for command, text in EXAMPLES.items():
        assert all(p.startswith("out/") for p in written[command]), (command, written)
        named = [p for need in needs(text) for p in written[need]]
        for argv in example_lines(text):
            for path in paths(argv, READS):
                assert any(path == w or path.startswith(w + "/")
                           for w in named + written[command]), (command, path, needs(text))
    assert needs(EXAMPLES["fidelity"]) == ["build", "generate"]


def test_example_paths_are_the_bundled_examples_from_any_folder(examples, tmp_path,
                                                                monkeypatch, capsys):
    """``examples/dec-pkt.toml`` where there is none is the bundled file, said in one line;
    a folder's own examples/ is read as it is, with nothing said."""
    monkeypatch.chdir(tmp_path)
    argv = ["explain", "--catalog", "examples/dec-pkt.toml", "--workload",
            "examples/workload.toml", "--query", "Q1"]
    assert main(argv) == 0
    captured = capsys.readouterr()
    notes = [line for line in captured.err.splitlines() if "bundled" in line]
    assert len(notes) == 2 and notes[0].startswith("cqopt: examples/dec-pkt.toml is not in "
                                                   "this folder"), captured.err
    from cqopt.examples import example  # the installed package's copy (a wheel's, or here)

    assert str(example("dec-pkt.toml")) in notes[0] and "== Q1" in captured.out
    (tmp_path / "examples").mkdir()
    (tmp_path / "examples" / "dec-pkt.toml").write_text("not a catalog [", encoding="utf-8")
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "bundled" not in err.split("workload")[0] and "dec-pkt.toml" in err, err


@pytest.mark.slow
def test_every_help_example_runs_as_written(spark, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # an empty folder: no examples/, no charts/
    ran, refused, done, notes = [], [], set(), []

    def run_example(command: str) -> None:
        """Run one command's examples, after the examples its help names."""
        if command in done:
            return
        done.add(command)
        for need in needs(EXAMPLES[command]):
            run_example(need)
        for argv in example_lines(EXAMPLES[command]):
            assert argv[0] == command or command == "run", argv  # run's example generates first
            smaller = argv[0] == "calibrate" and "--from-run" not in argv
            if smaller:
                argv = argv + SMALLER[("calibrate", "--out")]
            status = main(argv)
            err = capsys.readouterr().err
            notes.extend(line for line in err.splitlines() if "bundled with cqopt" in line)
            if argv[0] == "calibrate" and status == 2:
                last = err.splitlines()[-1]
                assert "nothing written" in last or (smaller and "pass a larger --rows" in last
                                                     ), err[-2000:]
                refused.append(argv)
                status = 0
            assert status == 0, f"cqopt {shlex.join(argv)} exited {status}: {err[-2000:]}"
            ran.append(argv[0])

    # The reverse of a user's order: every example whose input another writes comes first.
    for command in reversed(ORDER):
        run_example(command)
    out = tmp_path / "out"
    assert (out / "charts" / "manifest.json").exists()
    assert (out / "q2.png").stat().st_size > 1000
    assert (out / "report" / "report.html").exists()
    assert "sharing each round's 0.8 s" in (out / "report-overload" / "report.md").read_text(
        encoding="utf-8")
    assert (out / "run" / "report.md").exists()
    assert (out / "engine.toml").exists() or any("--from-run" in a for a in refused)
    assert sorted(set(ran)) == sorted(set(EXAMPLES))
    assert not (tmp_path / "examples").exists() and notes  # read from the package, and said
