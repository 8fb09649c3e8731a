"""Writing a trace to disk, in the format its file name implies.

>>> import pandas as pd, tempfile, pathlib
>>> out = pathlib.Path(tempfile.mkdtemp()) / "S.csv"
>>> write_trace(pd.DataFrame({"ts": [0.5, 1.0], "a": [1, 2]}), out).read_text().splitlines()
['ts,a', '0.5,1', '1.0,2']
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from cqopt.replay.trace_format import DEC_COLUMNS, TraceError, trace_format


def write_trace(df: pd.DataFrame, path: str | Path, fmt: str | None = None) -> Path:
    """Write a trace as Parquet, CSV (gzipped for ``.csv.gz``) or DEC-PKT text, by extension.

    DEC-PKT text needs the columns ``ts src_host dest_host src_port dest_port
    bytes``; times are written to the microsecond, as the DEC traces have them.
    """
    path = Path(path)
    fmt = trace_format(path, fmt)
    path.parent.mkdir(parents=True, exist_ok=True)
    if fmt == "parquet":
        df.to_parquet(path, index=False)
    elif fmt == "csv":
        df.to_csv(path, index=False)
    else:
        by_lower = {c.lower(): c for c in df.columns}
        absent = [c for c in DEC_COLUMNS if c not in by_lower]
        if absent:
            raise TraceError(str(path), f"the DEC-PKT format needs columns "
                             f"{' '.join(DEC_COLUMNS)}; the frame lacks {', '.join(absent)}")
        out = df[[by_lower[c] for c in DEC_COLUMNS]]
        out.to_csv(path, sep=" ", header=False, index=False, float_format="%.6f")
    return path


