"""The files of a streaming run's file sources: whose they are, and whether each was read whole.

Spark's file stream source lists a directory, reads each new file once, at
the size it had when listed, and never looks at it again. A file that is
still being written when it is listed (a slow ``cp``, a writer that flushes
in pieces) is therefore read in part, and the rest of its tuples would be
lost without a word. The run keeps a :class:`FileLedger`: for each file,
the size Spark listed and the tuples it read (``_metadata.file_size`` and a
count per ``_metadata.file_path``). Before a micro-batch's rounds close,
:meth:`FileLedger.grown` compares every file's size on disk with what was
read; the complete lines a CSV file gained since are read by
:func:`csv_remainder` and run with the rounds they belong to, so a file is
read whole. What cannot be read whole (a Parquet or compressed file that
changed, lines of rounds that already ran) is counted and reported, never
half-counted in silence.

A source directory must also be one stream's: :func:`foreign_stream_files`
finds files named after another stream of the catalog (a trace set's
``UDP.parquet`` handed as ``--source TCP=...``).

>>> ledger = FileLedger()
>>> ledger.record("TCP", "file:/x/part-0.csv", size=10, rows=2)
>>> ledger.files["/x/part-0.csv"].rows
2
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from cqopt.replay.trace_format import trace_stem

# A file that has kept its size for this long after its last change is settled: it is no
# longer looked at (a run of thousands of files does not stat them all every batch).
SETTLE_SECONDS = 120.0


@dataclass
class FileRecord:
    """What the run has read of one source file.

    ``size`` is the size Spark listed (what it read up to); ``spark_rows``
    the tuples Spark read of it and ``recovered_rows`` those read since;
    ``read_bytes`` how far the recovered lines reach (``size`` until a
    remainder is read).
    """

    stream: str
    size: int
    spark_rows: int
    read_bytes: int
    recovered_rows: int = 0
    settled: bool = False

    @property
    def rows(self) -> int:
        return self.spark_rows + self.recovered_rows

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Growth:
    """A file that is larger on disk than what the run has read of it."""

    path: str
    stream: str
    rows_read: int
    read_bytes: int
    size_now: int


def local_path(uri: str) -> str:
    """A ``file:`` URI as Spark's ``_metadata.file_path`` gives it -> a local path.

    >>> local_path("file:/tmp/a%20b/part-0.csv")
    '/tmp/a b/part-0.csv'
    >>> local_path("/tmp/x.csv")
    '/tmp/x.csv'
    """
    parsed = urlparse(uri)
    return unquote(parsed.path) if parsed.scheme in ("file", "") else uri


class FileLedger:
    """Per source file: the size Spark listed and the tuples read (kept in the run's state).

    Parameters
    ----------
    files : mapping, optional
        The ledger as :meth:`to_json` wrote it (a resumed run).
    """

    def __init__(self, files: Mapping[str, Mapping[str, Any]] | None = None):
        self.files: dict[str, FileRecord] = {
            path: FileRecord(**{k: v for k, v in rec.items()
                                if k in FileRecord.__dataclass_fields__})
            for path, rec in (files or {}).items() if isinstance(rec, Mapping)}

    def to_json(self) -> dict[str, dict[str, Any]]:
        return {path: rec.to_json() for path, rec in self.files.items()}

    def record(self, stream: str, uri: str, *, size: int, rows: int) -> None:
        """Spark read ``rows`` tuples of the file at ``uri``, listed at ``size`` bytes."""
        path = local_path(uri)
        known = self.files.get(path)
        if known is None:
            self.files[path] = FileRecord(stream, int(size), int(rows), int(size))
        else:  # Spark reads a file in one batch only: this is that batch again, replayed
            known.spark_rows = int(rows)

    def grown(self, now: float | None = None) -> list[Growth]:
        """The files now larger than what was read of them; settles files long unchanged.

        Parameters
        ----------
        now : float, optional
            The wall clock (``time.time()``), for settling; taken when not given.

        Returns
        -------
        list of Growth
            One per file whose size on disk exceeds what the run read of it.
        """
        import time

        now = time.time() if now is None else now
        found = []
        for path, rec in self.files.items():
            if rec.settled:
                continue
            try:
                st = os.stat(path)
            except OSError:  # moved away after it was read: what was read stands
                rec.settled = True
                continue
            if st.st_size > rec.read_bytes:
                found.append(Growth(path, rec.stream, rec.rows, rec.read_bytes, st.st_size))
            elif now - st.st_mtime > SETTLE_SECONDS:
                rec.settled = True
        return found

    def recovered(self, growth: Growth, rows: int, read_bytes: int) -> None:
        """``rows`` more tuples of ``growth``'s file were read, up to ``read_bytes``."""
        rec = self.files[growth.path]
        rec.recovered_rows += rows
        rec.read_bytes = read_bytes


def csv_remainder(path: str | Path, rows_read: int, *, final: bool = False) -> tuple[list[str], int]:
    """The data lines of a CSV file past its first ``rows_read``, and the bytes they reach.

    Only complete lines are taken (ending in a newline), unless ``final``
    (the input has ended: a last line without a newline is whole too);
    blank lines are skipped, as Spark's CSV reader skips them.

    Parameters
    ----------
    path : str or Path
        A plain (uncompressed) CSV file with a header line.
    rows_read : int
        The data lines already read (Spark's count for the file).
    final : bool
        Take a last line that has no newline yet.

    Returns
    -------
    (lines, read_bytes)
        The lines (without their newline) and the byte offset after the last one taken.

    Examples
    --------
    >>> import tempfile, os
    >>> p = os.path.join(tempfile.mkdtemp(), "t.csv")
    >>> _ = open(p, "w").write("ts,a\\n1,2\\n2,3\\n3,")
    >>> csv_remainder(p, 1)
    (['2,3'], 13)
    >>> csv_remainder(p, 1, final=True)
    (['2,3', '3,'], 15)
    """
    with open(path, "rb") as fh:
        data = fh.read()
    end = len(data) if final else data.rfind(b"\n") + 1
    lines = data[:end].split(b"\n")
    body = [ln.rstrip(b"\r") for ln in lines[1:]]  # past the header
    body = [ln for ln in body if ln.strip()]
    return [ln.decode("utf-8", errors="replace") for ln in body[rows_read:]], end


def foreign_stream_files(directory: str | Path, stream: str,
                         streams: Iterable[str]) -> list[str]:
    """The files of a source directory named after another stream of the catalog.

    A trace set (``cqopt generate`` without ``--file-per-round``) holds one
    file per stream, ``TCP.parquet``, ``UDP.parquet``, ...; handed whole as
    one stream's source, every stream's tuples would run as that one's.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> for n in ("TCP.parquet", "UDP.parquet", "part-00000.parquet"):
    ...     _ = (d / n).write_bytes(b"")
    >>> foreign_stream_files(d, "TCP", ["TCP", "UDP", "SF"])
    ['UDP.parquet']
    """
    others = {s.lower() for s in streams if s.lower() != stream.lower()}
    found = []
    for path in sorted(Path(directory).iterdir()):
        stem = trace_stem(path.name)
        if stem is not None and stem.lower() in others:
            found.append(path.name)
    return found
