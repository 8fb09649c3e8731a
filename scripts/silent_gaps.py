"""Benchmark: how long each command of the README stays silent, off a terminal.

Runs the README's main job, step by step, and ``cqopt run`` on generated
round files, each as a user would (``python -m cqopt ...``, stdout and
stderr into one pipe, so no terminal: the plain-line progress), timestamps
every line it prints, and prints per command its wall time and its longest
silent gap: the time from its start or a line to the next line (or its
end), with the line the gap followed.

    flock /tmp/cqopt-spark.lock python scripts/silent_gaps.py [--duration 600]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def timed_lines(argv: list[str], cwd: Path) -> tuple[int, float, list[tuple[float, str]]]:
    """Run ``cqopt argv``: exit status, seconds, and each line with when it came."""
    began = time.monotonic()
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYTHONUNBUFFERED": "1"}
    process = subprocess.Popen([sys.executable, "-m", "cqopt", *argv], cwd=cwd, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               bufsize=1)
    lines = [(time.monotonic() - began, line.rstrip("\n")) for line in process.stdout]
    status = process.wait()
    return status, time.monotonic() - began, lines


def longest_gap(seconds: float, lines: list[tuple[float, str]]) -> tuple[float, str]:
    """The longest silence and the line it followed ("(start)" for the first)."""
    marks = [(0.0, "(start)"), *lines, (seconds, "(end)")]
    return max(((b[0] - a[0], a[1]) for a, b in zip(marks, marks[1:])), key=lambda g: g[0])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=int, default=600, help="seconds of traces (600)")
    parser.add_argument("--show", action="store_true", help="print every command's lines")
    args = parser.parse_args()
    cat, work = str(EXAMPLES / "dec-pkt.toml"), str(EXAMPLES / "workload.toml")
    steady = ["--steady", "TCP.src_host", "--steady", "UDP.dest_host", "--steady",
              "SF.dest_host"]
    with tempfile.TemporaryDirectory(prefix="cqopt-silent-") as tmp:
        here = Path(tmp)
        commands = {
            "build": ["build", "--catalog", cat, "--workload", work, "--out", "charts"],
            "build --engine spark": ["build", "--catalog", cat, "--workload", work, "--out",
                                     "charts-spark", "--engine", "spark"],
            "show": ["show", "--charts", "charts", "--query", "Q2", "--out", "q2.png"],
            "generate": ["generate", "--catalog", cat, "--out", "traces", "--duration",
                         str(args.duration), *steady],
            "fidelity": ["fidelity", "--catalog", cat, "--workload", work, "--charts",
                         "charts", "--traces", "traces", "--out", "report"],
            "generate --file-per-round": ["generate", "--catalog", cat, "--out", "rounds",
                                          "--streams", "TCP", "--duration", "30",
                                          "--file-per-round", "1"],
            "run": ["run", "--catalog", cat, "--workload", work, "--charts", "charts",
                    "--query", "Q1", "--source", "TCP=rounds/TCP", "--out", "run"],
        }
        print(f"{'command':<28} {'exit':>4} {'seconds':>8} {'longest silence':>15}  after")
        for label, argv in commands.items():
            status, seconds, lines = timed_lines(argv, here)
            gap, after = longest_gap(seconds, lines)
            print(f"{label:<28} {status:4d} {seconds:8.1f} {gap:15.1f}  {after[:70]}",
                  flush=True)
            if args.show or status:
                for at, line in lines:
                    print(f"    {at:7.1f}  {line[:110]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
