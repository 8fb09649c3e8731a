"""Print the cost models' relative error against the reference executor.

For the OM paper's Q1 and Q2 and a two-stream join with selections, at
several rates and selectivities, every candidate plan runs on the reference
executor over generated windows; the table gives, per model and operator
kind, the median and maximum relative error of the predicted output rate,
OM's intermediate queue, and the model's memory against the bytes the
operator holds (see costmodel/validation.py for what each row means).

    python scripts/validate_costmodel.py [--seed 0]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

from cqopt.catalog import load_catalog
from cqopt.costmodel.validation import Setting, error_table, measure

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
QUERIES = {
    "Q1": "SELECT TCP.src_host, TCP.dest_host FROM TCP WHERE TCP.dest_host = 2 WINDOW [1]",
    "R1": "SELECT TCP.src_host FROM TCP WHERE TCP.bytes BETWEEN 10 AND 20 WINDOW [1]",
    "J2": "SELECT TCP.src_host, UDP.bytes FROM TCP, UDP WHERE TCP.src_host = UDP.dest_host "
          "AND TCP.dest_host = 2 WINDOW [1]",
    "Q2": "SELECT * FROM TCP, UDP, SF WHERE TCP.src_host = UDP.dest_host "
          "AND UDP.dest_host = SF.dest_host WINDOW [1]",
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    catalog = load_catalog(EXAMPLES / "dec-pkt.toml")
    settings = [Setting(r, s) for r in (100, 300, 1000) for s in (0.05, 0.3, 0.8)]
    rows = measure(catalog, {k: v for k, v in QUERIES.items() if k != "Q2"}, settings,
                   args.seed)
    small = [Setting(r, s) for r in (100, 300) for s in (0.3,)]
    rows = pd.concat([rows, measure(catalog, {"Q2": QUERIES["Q2"]}, small, args.seed)])
    with pd.option_context("display.width", 120, "display.float_format", "{:.4f}".format):
        print(error_table(rows).to_string(index=False))


if __name__ == "__main__":
    main()
