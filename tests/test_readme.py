"""The README's Python blocks run as written: each in a fresh interpreter, in document order,
from one empty folder (the main job first, then the blocks that read what it wrote in out/)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

# What each block must have done, checked in its own interpreter after it ran: a text only
# that block holds, a pattern a line of its stdout must match, and checks on the names it left.
CHECKS = {
    "cqopt.fidelity(": (r"^(0\.\d+|1\.0)$", """
from pathlib import Path
assert sorted(replays) == ["Q1", "Q2"], sorted(replays)
assert replays["Q2"].summary["rounds"] == 59 and 0 < replays["Q1"].summary["fidelity"] <= 1
assert "Q2" in Path("out/report/report.html").read_text(encoding="utf-8")
"""),
    "cqopt.AdaptiveQuery(": ("Stream TCP", """
assert many.plan_index.shape == (5,)
assert charts.check(example("dec-pkt.toml")).stale is False
# One default estimator: the step runs the plan choose gives at the same statistics.
assert outcome.plan_id == charts.choose("Q1", {"sel.TCP": 0.12, "rate.TCP": 610.0}).plan_id
"""),
    "readStream": ("SELECT", """
import pandas as pd
written, tcp = pd.read_parquet("out/q1"), pd.read_parquet("out/rounds/TCP")
assert tcp["ts"].max() - tcp["ts"].min() > 9  # ten rounds of TCP, all read
# Q1 keeps TCP.src_host where TCP.dest_host = 2: the plan's rows, of every file.
assert len(written) == int((tcp["dest_host"] == 2).sum()) > 0, (plan.id, len(written))
"""),
    # A plan's SQL on DuckDB over a whole trace gives every round's rows, as the reference
    # executor gives them round by round (rounds from the first tuple, as cqopt run cuts them).
    "duckdb": ("count", """
import pandas as pd
from cqopt.catalog import load_catalog
from cqopt.costmodel.reference_executor import execute
from cqopt.examples import example
from cqopt.optimizer.query.logical import parse_query
from cqopt.replay.rounds import round_array

query = parse_query(charts["Q2"].spec.sql, load_catalog(example("dec-pkt.toml")))
data = {s: pd.read_parquet(f"out/traces/{s}.parquet") for s in query.stream_names}
start = min(float(f.ts.min()) for f in data.values())
assert len(rows) > 0
for r in (0, 7, 58):
    windows = {s: f[round_array(f.ts, start, 1.0) == r] for s, f in data.items()}
    assert (rows.cqopt_round == r).sum() == len(execute(plan, query, windows).result), r
"""),
}

# A bare expression whose comment reads as a value (`choice  # Choice(...)`), as a session
# at the prompt shows it: the check is that its repr is that comment.
_SHOWN = re.compile(r"^(?P<expr>[^#\s].*?)\s+# (?P<shown>[(\[{'\"0-9].*|[A-Z]\w*\(.*)$")


def _python_blocks(readme: str) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", readme, flags=re.S | re.M)


def _shown_values(block: str) -> str:
    """Checks that each value the block's comments show is the value its line gives."""
    checks = []
    for line in block.splitlines():
        found = _SHOWN.match(line)
        if found and "=" not in found["expr"].replace("==", ""):
            value = f"repr(({found['expr']}))"
            checks.append(f"assert {value} == {found['shown']!r}, {value}")
    return "\n".join(checks)


# The blocks' JVMs live a minute: compiling hot code only with C1, and a serial collector,
# halves the CPU a Spark start costs (13 s against 26 s here) and changes no result.
_SHORT_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def _run(code: str, where: Path, what: str) -> subprocess.CompletedProcess:
    """``code`` in a new interpreter of this environment, in ``where``; stdout and stderr."""
    bin_dir = str(Path(sys.executable).parent)
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable,
           "JAVA_TOOL_OPTIONS": f"{os.environ.get('JAVA_TOOL_OPTIONS', '')} {_SHORT_JVM}".strip(),
           "PATH": bin_dir + os.pathsep + os.environ.get("PATH", "")}
    done = subprocess.run([sys.executable, "-c", code], cwd=where, env=env, text=True,
                          capture_output=True, timeout=600)
    assert done.returncode == 0, (f"the README's {what} failed (exit {done.returncode}):\n"
                                  + "\n".join(done.stderr.splitlines()[-30:]))
    return done


@pytest.mark.spark
@pytest.mark.slow
def test_every_python_block_runs_in_a_fresh_interpreter_in_order(repo_root, tmp_path):
    blocks = _python_blocks((repo_root / "README.md").read_text(encoding="utf-8"))
    assert blocks and "cqopt.fidelity(" in blocks[0], "the main job comes first"
    assert "progress=False" in blocks[0]  # the argument that silences the functions is named
    checked = [[m for m in CHECKS if m in block] for block in blocks]
    assert all(len(m) == 1 for m in checked), f"each block, one entry of CHECKS: {checked}"
    assert sorted(m for (m,) in checked) == sorted(CHECKS), checked
    for number, (block, (marker,)) in enumerate(zip(blocks, checked), 1):
        said, check = CHECKS[marker]
        code = "\n".join([block, _shown_values(block), check])
        done = _run(code, tmp_path, f"python block {number} ({block.splitlines()[0]!r} ...)")
        assert re.search(said, done.stdout, flags=re.M), (number, said, done.stdout[-500:])
    shown = _shown_values(blocks[1])
    assert shown.count("assert") == 2, shown  # the run-time block's two values are checked


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
