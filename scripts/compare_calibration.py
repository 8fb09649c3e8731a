"""How a workload's charts change when the operator rates change (e.g. after calibration).

Builds the workload's charts twice in this process (``cqopt build --engine
local``), once with each catalog, into a temporary folder (or ``--keep DIR``),
loads both with :func:`cqopt.load` and prints per query: the cells, the plans
each chart uses (and how many cells each holds), and the share of cells whose
plan differs between the two charts.

    python scripts/compare_calibration.py --catalog examples/dec-pkt.toml \\
        --calibrated /tmp/dec-pkt-spark.toml --workload examples/workload.toml
"""

from __future__ import annotations

import argparse
import tempfile
from collections import Counter
from pathlib import Path

import numpy as np

import cqopt
from cqopt.cli.main import main as cqopt_main


def cell_plans(chart) -> np.ndarray:
    """The plan id of every cell of a loaded chart."""
    return np.asarray(chart.plan_ids, dtype=object)[chart.plan_index]


def usage(ids: np.ndarray) -> str:
    return ", ".join(f"{plan} ({n})" for plan, n in Counter(ids.ravel().tolist()).most_common())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--catalog", required=True, help="the catalog with the paper's rates")
    parser.add_argument("--calibrated", required=True, help="the calibrated catalog")
    parser.add_argument("--workload", required=True)
    parser.add_argument("--keep", metavar="DIR", help="build the chart sets here and keep them")
    args = parser.parse_args()
    folder = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="cqopt-compare-"))
    sets = {}
    for label, catalog in (("paper", args.catalog), ("calibrated", args.calibrated)):
        out = folder / label
        code = cqopt_main(["build", "--catalog", catalog, "--workload", args.workload,
                           "--out", str(out), "--engine", "local", "--quiet", "--force"])
        if code:
            raise SystemExit(code)
        sets[label] = cqopt.load(out)
    print()
    print(f"{'query':<8} {'cells':>6} {'plans used paper':>17} {'calibrated':>11} "
          f"{'cells changed':>14}")
    for name in sets["paper"]:
        before, after = cell_plans(sets["paper"][name]), cell_plans(sets["calibrated"][name])
        changed = float(np.mean(before != after))
        print(f"{name:<8} {before.size:6d} {len(set(before.ravel())):17d} "
              f"{len(set(after.ravel())):11d} {changed:14.1%}")
        print(f"  paper:      {usage(before)}")
        print(f"  calibrated: {usage(after)}")
    if not args.keep:
        print(f"(chart sets built in {folder})")


if __name__ == "__main__":
    main()
