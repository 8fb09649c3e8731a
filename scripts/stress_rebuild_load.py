"""Stress: rebuild a chart set with ``--force`` in a loop while another process loads it.

A child process rebuilds ``OUT`` in-process (``cqopt build --engine local``, small k),
alternating ``--model om`` and ``--model pipes``, as fast as it can; this process loads
``OUT`` again and again meanwhile and checks every load against reference builds of the
two models (their plan ids and plan indices differ). A load is

- **whole** when every query's plans and plan index are those of the model the loaded
  manifest names (the old set or the new one),
- **mixed** when not (one build's plan index under the other build's manifest),
- a **false error** when it raised, though the set was only being rebuilt.

It prints the counts, the builds that ran meanwhile, and loads per second::

    python scripts/stress_rebuild_load.py [--loads 10000] [--k 3]

``tests/test_concurrent_rebuild.py`` runs :func:`stress` for a few seconds.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import cqopt.charts as charts
from cqopt.cli.main import main as cqopt_main
from cqopt.examples import example

MODELS = ("om", "pipes")

# The rebuild loop, run in a child process: cqopt build --force in-process, the models
# alternating, until the stop file exists; it prints how many builds it finished.
REBUILD = """
import contextlib, io, json, os, sys
from cqopt.cli.main import main
args, stop = json.loads(sys.argv[1]), sys.argv[2]
builds = 0
while not os.path.exists(stop):
    model = ("om", "pipes")[builds % 2]
    with contextlib.redirect_stdout(io.StringIO()):
        status = main(args + ["--model", model, "--force"])
    if status != 0:
        sys.exit(f"build {builds} failed with status {status}")
    builds += 1
print(builds)
"""


def build_args(out: Path, k: int) -> list[str]:
    """``cqopt build`` of the example workload into ``out``, in this process, at ``k``."""
    return ["build", "--catalog", str(example("dec-pkt.toml")), "--workload",
            str(example("workload.toml")), "--out", str(out), "--engine", "local", "--k", str(k),
            "--quiet"]


def fingerprint(chart_set) -> dict[str, tuple[str, tuple[str, ...], bytes]]:
    """Per query: the model its manifest names, its plan ids and its plan index's bytes."""
    return {name: (chart.spec.model, chart.plan_ids, chart.plan_index.tobytes())
            for name, chart in chart_set.charts.items()}


def references(root: Path, k: int) -> dict[str, dict]:
    """The fingerprint of one build of each model."""
    refs = {}
    for model in MODELS:
        out = root / f"reference-{model}"
        with contextlib.redirect_stdout(io.StringIO()):
            status = cqopt_main(build_args(out, k) + ["--model", model])
        if status != 0:
            raise SystemExit(f"the reference build of {model} failed")
        refs[model] = fingerprint(charts.load(out))
    if refs["om"] == {q: ("om", *rest[1:]) for q, rest in refs["pipes"].items()}:
        raise SystemExit(f"at k = {k} the two models give the same charts: a mix would not "
                         "show; choose another --k")
    return refs


def classify(out: Path, refs: dict[str, dict]) -> tuple[str, str]:
    """One load of ``out``: ("whole" | "mixed" | "error", detail)."""
    try:
        loaded = fingerprint(charts.load(out))
    except Exception as err:  # any error counts: a rebuild must never cause one
        return "error", f"{type(err).__name__}: {err}"
    models = {model for model, _, _ in loaded.values()}
    if len(models) != 1 or next(iter(models)) not in refs:
        return "mixed", f"models {sorted(models)} in one set"
    model = models.pop()
    if loaded != refs[model]:
        wrong = [q for q in loaded if loaded[q] != refs[model].get(q)]
        return "mixed", f"queries {wrong} differ from the {model} build"
    return "whole", model


def stress(root: Path, loads: int | None = None, seconds: float | None = None,
           k: int = 3) -> dict:
    """Load ``root/charts`` ``loads`` times (or for ``seconds``) while a child rebuilds it.

    Returns the counts: loads, whole (and of which model), mixed, false errors (the
    first few messages), builds the child finished meanwhile, and the loads' seconds.
    """
    refs = references(root, k)
    out = root / "charts"
    with contextlib.redirect_stdout(io.StringIO()):
        status = cqopt_main(build_args(out, k) + ["--model", "om"])
    if status != 0:
        raise SystemExit("the first build failed")
    stop = root / "stop"
    child = subprocess.Popen([sys.executable, "-c", REBUILD, json.dumps(build_args(out, k)),
                              str(stop)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
    counts = {"loads": 0, "whole": {m: 0 for m in MODELS}, "mixed": 0, "false_errors": 0,
              "details": []}
    try:
        start = time.perf_counter()
        while (loads is None or counts["loads"] < loads) and \
                (seconds is None or time.perf_counter() - start < seconds):
            if child.poll() is not None:
                break  # the rebuild loop failed: reported below
            kind, detail = classify(out, refs)
            counts["loads"] += 1
            if kind == "whole":
                counts["whole"][detail] += 1
            else:
                counts["mixed" if kind == "mixed" else "false_errors"] += 1
                if len(counts["details"]) < 5:
                    counts["details"].append(detail)
        counts["seconds"] = time.perf_counter() - start
    finally:
        stop.touch()
        stdout, stderr = child.communicate(timeout=120)
    if child.returncode != 0:
        raise SystemExit(f"the rebuild loop failed: {stderr.strip()[-500:]}")
    counts["builds"] = int(stdout.strip())
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--loads", type=int, default=10_000, help="loads to run (10000)")
    parser.add_argument("--k", type=int, default=3, help="regions per axis of the builds (3)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="cqopt-stress-") as root:
        counts = stress(Path(root), loads=args.loads, k=args.k)
    print(f"loads {counts['loads']} in {counts['seconds']:.1f} s "
          f"({counts['loads'] / counts['seconds']:.0f} loads/s) while {counts['builds']} "
          f"rebuilds ran (--force, om and pipes alternating, k = {args.k})")
    print(f"whole: {counts['whole']['om']} om sets, {counts['whole']['pipes']} pipes sets")
    print(f"mixed sets: {counts['mixed']}")
    print(f"false errors: {counts['false_errors']}")
    for detail in counts["details"]:
        print(f"  {detail[:300]}")


if __name__ == "__main__":
    main()
