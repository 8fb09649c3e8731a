"""The README's Python blocks run as written (the run-time one on a chart set built here)."""

from __future__ import annotations

import re

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
    assert "Stream TCP" in capsys.readouterr().out  # explain() printed the plan


def test_the_main_job_block_names_only_what_cqopt_has(repo_root):
    # The main job takes Spark minutes; tests/test_pipelines.py runs the same functions on a
    # small trace. Here: every name of cqopt the block uses exists.
    import cqopt

    (text,) = [b for b in _python_blocks((repo_root / "README.md").read_text(encoding="utf-8"))
               if "cqopt.build(" in b]
    for name in re.findall(r"\bcqopt\.(\w+)", text):
        assert hasattr(cqopt, name), name
