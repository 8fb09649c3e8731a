"""The CSV trace format: a header line, then one tuple per line.

The time column is named (``ts``, ``timestamp`` or ``time`` unless the
stream or the caller names another). Files end in ``.csv``, optionally
compressed (``.csv.gz``).

>>> import pandas as pd, tempfile, pathlib
>>> path = pathlib.Path(tempfile.mkdtemp()) / "S.csv.gz"
>>> FORMAT.write(pd.DataFrame({"ts": [0.5, 1.0], "a": [1, 2]}), path)
>>> FORMAT.matches(path), FORMAT.read(path).to_dict("list")
(True, {'ts': [0.5, 1.0], 'a': [1, 2]})
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from cqopt.replay.trace_format import StreamSource, TraceFormat


def read_csv(path: Path) -> pd.DataFrame:
    """The table of a CSV file with a header (compression read from the name)."""
    return pd.read_csv(path)


def write_csv(frame: pd.DataFrame, path: Path) -> None:
    """Write ``frame`` with a header, no index (gzipped for ``.csv.gz``)."""
    frame.to_csv(path, index=False)


def csv_header(path: Path) -> list[str]:
    """The column names on a CSV file's first line (gzipped or not)."""
    import gzip

    opener = gzip.open if path.name.lower().endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as fh:
        line = fh.readline().strip()
    if not line:
        raise ValueError("no header line (a CSV trace needs one)")
    return [c.strip() for c in line.split(",")]


FORMAT = TraceFormat("csv", (".csv",), read_csv, write_csv,
                     description="CSV with a header line and a named time column",
                     columns=csv_header,
                     stream=StreamSource("csv", (("header", "true"), ("enforceSchema", "false"))))
