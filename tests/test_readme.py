"""The README's Python blocks run as written (the run-time one on a chart set built here)."""

from __future__ import annotations

import re

import pytest

from cqopt.cli.main import main


def _python_blocks(readme: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", readme, flags=re.S)


def test_the_run_time_block_runs_as_written(repo_root, examples, tmp_path, monkeypatch, capsys):
    blocks = [b for b in _python_blocks((repo_root / "README.md").read_text(encoding="utf-8"))
              if 'cqopt.load("out/charts")' in b]
    assert len(blocks) == 1, "the README has one run-time block"
    monkeypatch.chdir(tmp_path)
    (tmp_path / "examples").symlink_to(examples)
    assert main(["build", "--catalog", "examples/dec-pkt.toml", "--workload",
                 "examples/workload.toml", "--out", "out/charts", "--engine", "local"]) == 0
    scope: dict = {}
    exec(compile(blocks[0], "README.md", "exec"), scope)  # noqa: S102 (the README's own code)
    assert scope["many"].plan_index.shape == (5,)
    assert scope["outcome"].plan_id in scope["charts"]["Q1"].plan_ids
    # One default estimator: the step runs the plan choose gives at the same statistics.
    assert scope["outcome"].plan_id == scope["charts"].choose(
        "Q1", {"sel.TCP": 0.12, "rate.TCP": 610.0}).plan_id
    assert "Stream TCP" in capsys.readouterr().out  # explain() printed the plan


def test_the_main_job_block_names_only_what_cqopt_has(repo_root):
    # The main job takes Spark minutes; tests/test_pipelines.py runs the same functions on a
    # small trace. Here: every name of cqopt the block uses exists.
    import cqopt

    (text,) = [b for b in _python_blocks((repo_root / "README.md").read_text(encoding="utf-8"))
               if "cqopt.build(" in b]
    for name in re.findall(r"\bcqopt\.(\w+)", text):
        assert hasattr(cqopt, name), name
    assert "progress=False" in text  # the argument that silences the functions is named


def _generate_line(block: str) -> list[str]:
    """The cqopt generate command a block's comment gives, as argv."""
    lines = [ln.strip().lstrip("#").strip() for ln in block.splitlines()]
    start = next(i for i, ln in enumerate(lines) if "cqopt generate" in ln)
    text = (lines[start].split("cqopt ", 1)[1] + " " + lines[start + 1]).split()
    return text


@pytest.mark.spark
@pytest.mark.slow
def test_the_structured_streaming_block_runs_as_written(spark, repo_root, examples, tmp_path,
                                                        monkeypatch, capsys):
    """issue 19/21: the block ran off before writing, and its 3-column schema made
    to_spark fail; now it writes the plan's result of every round."""
    import pandas as pd

    blocks = _python_blocks((repo_root / "README.md").read_text(encoding="utf-8"))
    (run_time,) = [b for b in blocks if 'cqopt.load("out/charts")' in b]
    (streaming,) = [b for b in blocks if "readStream" in b]
    monkeypatch.chdir(tmp_path)
    (tmp_path / "examples").symlink_to(examples)
    assert main(["build", "--catalog", "examples/dec-pkt.toml", "--workload",
                 "examples/workload.toml", "--out", "out/charts", "--engine", "local"]) == 0
    argv = _generate_line(streaming)
    assert argv[:1] == ["generate"] and "--file-per-round" in argv
    assert main(argv) == 0
    scope: dict = {}
    exec(compile(run_time, "README.md", "exec"), scope)  # noqa: S102 (the README's own code)
    # Spark resolves relative paths against its JVM's working directory, which the test's
    # chdir does not move: the block's out/ is made absolute, nothing else changes.
    streaming = streaming.replace('"out/', f'"{tmp_path}/out/')
    exec(compile(streaming, "README.md", "exec"), scope)  # noqa: S102
    written = pd.read_parquet(tmp_path / "out" / "q1")
    tcp = pd.read_parquet(tmp_path / "out" / "rounds" / "TCP")
    plan = scope["plan"]
    # Q1 keeps TCP.src_host where TCP.dest_host = 2: the plan's rows, every file read.
    assert len(written) == int((tcp["dest_host"] == 2).sum()) > 0, plan.id
    assert "SELECT" in capsys.readouterr().out


def test_the_duckdb_block_runs_as_written(repo_root, examples, tmp_path, monkeypatch, capsys):
    """A plan's SQL on DuckDB over a whole trace: every round's rows, as the executor gives
    them round by round (rounds from the first tuple, as cqopt run cuts them)."""
    from cqopt.catalog import load_catalog
    from cqopt.costmodel.reference_executor import execute
    from cqopt.optimizer.query.logical import parse_query
    from cqopt.replay.rounds import round_of
    import pandas as pd

    (block,) = [b for b in _python_blocks((repo_root / "README.md").read_text(encoding="utf-8"))
                if "duckdb" in b]
    monkeypatch.chdir(tmp_path)
    assert main(["build", "--catalog", "examples/dec-pkt.toml", "--workload",
                 "examples/workload.toml", "--out", "out/charts", "--engine", "local"]) == 0
    argv = _generate_line(block)
    assert argv[:1] == ["generate"] and main(argv + ["--quiet"]) == 0
    scope: dict = {}
    exec(compile(block, "README.md", "exec"), scope)  # noqa: S102 (the README's own code)
    assert "count" in capsys.readouterr().out
    rows, plan = scope["rows"], scope["plan"]
    query = parse_query(scope["charts"]["Q2"].spec.sql, load_catalog(examples / "dec-pkt.toml"))
    data = {s: pd.read_parquet(tmp_path / "out" / "traces" / f"{s}.parquet")
            for s in query.stream_names}
    start = min(float(f.ts.min()) for f in data.values())
    for r in (0, 7):  # two rounds, by the executor
        windows = {s: f[[round_of(t, start, 1.0) == r for t in f.ts]] for s, f in data.items()}
        assert (rows.cqopt_round == r).sum() == len(execute(plan, query, windows).result)
    assert len(rows) > 0


def test_the_readme_places_cqopt_beside_aqe_defines_its_words_and_keeps_cells_short(
        repo_root):
    """A Spark user's first question (AQE), the reports' two words defined where a reader
    starts, and tables a reader can scan: no cell over 300 characters."""
    readme = (repo_root / "README.md").read_text(encoding="utf-8")
    assert "adaptive query execution (AQE)" in readme
    aqe = readme[readme.index("### cqopt and Spark's adaptive query execution"):]
    aqe = aqe[:aqe.index("\n#")]
    for said in ("shuffle", "join order", "before each round", "precomputed", "hints"):
        assert said in aqe, said
    assert re.search(r"\*\*Regret\*\*: [^*]*minus 1", readme)
    assert re.search(r"\*\*Fidelity\*\*: the share of rounds", readme)
    assert readme.index("**Regret**") < readme.index("## Using it")
    cells = [cell for line in readme.splitlines() if line.startswith("|")
             for cell in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
    assert cells and max(map(len, cells)) <= 300, max(cells, key=len)[:120]
    # every command of the table has its details, its synopsis first
    from cqopt.cli.main import EXAMPLES

    for command in EXAMPLES:
        assert f"[`cqopt {command}`](#cqopt-{command})" in readme
        assert f"#### cqopt {command}\n\n```\ncqopt {command} " in readme
