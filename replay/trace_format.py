"""Stream trace files: their formats, what reading one found, and their errors.

A *trace* is the record of one stream's tuples, each with its arrival time,
in one of three formats, chosen by name or given:

- ``dec``: the Internet Traffic Archive's DEC-PKT text format, one packet per
  line, whitespace-separated ``ts src_host dest_host src_port dest_port
  bytes``, no header (``.dec``, ``.txt``, ``.tcp``, ``.udp``, ``.sf``,
  ``.dat``, optionally gzipped);
- ``csv``: CSV with a header line and a named timestamp column (``.csv``,
  ``.csv.gz``);
- ``parquet``: a Parquet file or a directory of them (``.parquet``).

Reading is Spark's (:mod:`cqopt.spark.trace_read`), writing pandas'
(:mod:`cqopt.replay.trace_write`), generating numpy's
(:mod:`cqopt.replay.trace_generate`); all three agree on these formats.

>>> trace_format("x/dec-pkt-1.tcp.gz"), trace_format("a.csv.gz")
('dec', 'csv')
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path

from cqopt.errors import CqoptError

FORMATS = ("dec", "csv", "parquet")
DEC_COLUMNS = ("ts", "src_host", "dest_host", "src_port", "dest_port", "bytes")
TS_NAMES = ("ts", "timestamp", "time")  # tried, in order, when nothing names the time column
_DEC_SUFFIXES = (".dec", ".txt", ".tcp", ".udp", ".sf", ".dat")
_COMPRESSION = (".gz", ".bz2", ".deflate", ".zst", ".lz4", ".snappy")


class TraceError(CqoptError):
    """A trace file is missing, unreadable, or not what the stream needs.

    >>> str(TraceError("t.csv", "no such file"))
    't.csv: no such file'
    """

    def __init__(self, path: str, problem: str):
        self.path, self.problem = path, problem
        super().__init__(f"{path}: {problem}")


@dataclass(frozen=True)
class TraceInfo:
    """What reading a trace found; times in seconds."""

    path: str
    rows: int
    start: float  # the smallest timestamp
    end: float  # the largest timestamp
    out_of_order: int  # rows whose timestamp is below the previous row's, in file order
    late: int  # rows whose timestamp is below the largest one before them, in file order
    format: str | None = None  # dec, csv or parquet
    ts_column: str | None = None  # the trace's column the times came from
    columns: tuple[str, ...] = ()  # the stream's columns the trace has (catalog spelling)
    missing: tuple[str, ...] = ()  # the stream's columns the trace lacks
    unparsed: dict[str, int] = field(default_factory=dict)  # column -> values not convertible

    @property
    def duration(self) -> float:
        return self.end - self.start

    @property
    def mean_rate(self) -> float:
        """Tuples per second over the trace's span (NaN for a single instant)."""
        return self.rows / self.duration if self.duration > 0 else math.nan


def trace_format(path: str | Path, fmt: str | None = None) -> str:
    """``fmt`` checked, or the format the file's name implies.

    >>> trace_format("x/dec-pkt-1.tcp.gz"), trace_format("a.csv.gz"), trace_format("p.parquet")
    ('dec', 'csv', 'parquet')
    """
    if fmt is not None:
        low = fmt.lower()
        if low not in FORMATS:
            raise TraceError(str(path), f"unknown trace format {fmt!r}; use one of "
                             + ", ".join(FORMATS))
        return low
    name = Path(str(path).rstrip("/")).name.lower()
    for suffix in _COMPRESSION:
        if name.endswith(suffix):
            name = name[: -len(suffix)]
            break
    if name.endswith(".csv"):
        return "csv"
    if name.endswith((".parquet", ".pq")):
        return "parquet"
    if name.endswith(_DEC_SUFFIXES):
        return "dec"
    if os.path.isdir(path) and any(Path(path).glob("*.parquet")):
        return "parquet"
    raise TraceError(str(path), "cannot tell the trace format from the file name; pass "
                     "fmt='dec' (DEC-PKT text), 'csv' or 'parquet'")


def trace_stem(name: str) -> str | None:
    """A trace file's name without its format (and compression) suffix; None for a name
    that is no trace file's.

    >>> trace_stem("TCP.parquet"), trace_stem("TCP.csv.gz"), trace_stem("TCP.backup.csv")
    ('TCP', 'TCP', 'TCP.backup')
    >>> trace_stem("notes.md") is None
    True
    """
    low = name.lower()
    for suffix in _COMPRESSION:
        if low.endswith(suffix):
            low, name = low[: -len(suffix)], name[: -len(suffix)]
            break
    for suffix in (".csv", ".parquet", ".pq", *_DEC_SUFFIXES):
        if low.endswith(suffix) and len(low) > len(suffix):
            return name[: -len(suffix)]
    return None


def _first_line(err: BaseException, limit: int = 300) -> str:
    text = str(err).strip().splitlines()
    line = text[0] if text else type(err).__name__
    return line if len(line) <= limit else line[: limit - 3] + "..."


