"""The DEC-PKT trace format: the Internet Traffic Archive's packet traces as text.

One packet per line, whitespace-separated ``ts src_host dest_host src_port
dest_port bytes``, no header; times in seconds to the microsecond. Files end
in ``.dec``, ``.txt``, ``.tcp``, ``.udp``, ``.sf`` or ``.dat``, optionally
compressed (``dec-pkt-1.tcp.gz``). Spark reads it with
:mod:`cqopt.spark.trace_read`'s DEC-PKT reader, which also counts malformed lines.

>>> import pandas as pd, tempfile, pathlib
>>> path = pathlib.Path(tempfile.mkdtemp()) / "t.tcp"
>>> FORMAT.write(pd.DataFrame({"ts": [0.5, 1.25], **{c: [1, 2] for c in DEC_COLUMNS[1:]}}), path)
>>> path.read_text().splitlines()[0]
'0.500000 1 1 1 1 1'
>>> FORMAT.matches(path), list(FORMAT.read(path).columns) == list(DEC_COLUMNS)
(True, True)
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from cqopt.replay.trace_format import TraceError, TraceFormat

DEC_COLUMNS = ("ts", "src_host", "dest_host", "src_port", "dest_port", "bytes")
SUFFIXES = (".dec", ".txt", ".tcp", ".udp", ".sf", ".dat")


def read_dec(path: Path) -> pd.DataFrame:
    """The packets of a DEC-PKT file: ``ts`` a float, the other columns integers."""
    return pd.read_csv(path, sep=r"\s+", header=None, names=list(DEC_COLUMNS),
                       skip_blank_lines=True)


def write_dec(frame: pd.DataFrame, path: Path) -> None:
    """Write the DEC-PKT columns of ``frame`` (any case), times to the microsecond.

    Raises
    ------
    TraceError
        The frame lacks one of the DEC-PKT columns.
    """
    by_lower = {c.lower(): c for c in frame.columns}
    absent = [c for c in DEC_COLUMNS if c not in by_lower]
    if absent:
        raise TraceError(str(path), f"the DEC-PKT format needs columns "
                         f"{' '.join(DEC_COLUMNS)}; the frame lacks {', '.join(absent)}")
    out = frame[[by_lower[c] for c in DEC_COLUMNS]]
    out.to_csv(path, sep=" ", header=False, index=False, float_format="%.6f")


FORMAT = TraceFormat("dec", SUFFIXES, read_dec, write_dec,
                     description="DEC-PKT text: ts src_host dest_host src_port dest_port bytes")
