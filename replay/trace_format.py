"""Stream trace files: the registry of their formats, what reading one found, and their errors.

A *trace* is the record of one stream's tuples, each with its arrival time.
Each format is one module, the way networkx's ``readwrite`` keeps one module
per graph format, holding a :class:`TraceFormat`: the file names it goes by,
``detect``, and the pure-Python (pandas) ``read`` and ``write``. The
built-in formats are

- ``dec`` (:mod:`cqopt.replay.trace_dec`): the Internet Traffic Archive's
  DEC-PKT text format, one packet per line, whitespace-separated ``ts
  src_host dest_host src_port dest_port bytes``, no header (``.dec``,
  ``.txt``, ``.tcp``, ``.udp``, ``.sf``, ``.dat``);
- ``csv`` (:mod:`cqopt.replay.trace_csv`): CSV with a header line and a
  named timestamp column (``.csv``);
- ``parquet`` (:mod:`cqopt.replay.trace_parquet`): a Parquet file or a
  directory of them (``.parquet``, ``.pq``);

each optionally compressed (``.gz``, ``.bz2``, ...). Everything that reads,
writes, names or finds a trace asks this registry: the writers
(:mod:`cqopt.replay.trace_write`), the generator's reader of real arrivals
(:mod:`cqopt.replay.trace_generate`), the fidelity replay's file finding
(:func:`trace_stem`), and Spark. Spark's readers live in
:mod:`cqopt.spark.trace_read`, which registers them here for the engine
``"spark"`` (:func:`register_trace_reader`): this module never imports
Spark; a format without a Spark reader is read on Spark through its pandas
reader.

Adding a format is one module defining ``FORMAT = TraceFormat(...)`` and its
name in :data:`BUILTIN_MODULES`; a format of one's own can be registered at
run time with :func:`register_trace_format`. Given a :class:`StreamSource`
(how Spark's file stream source reads its files), a format is also written one
file per round (``cqopt generate --file-per-round``) and streamed by ``cqopt run``.

>>> trace_format("x/dec-pkt-1.tcp.gz"), trace_format("a.csv.gz")
('dec', 'csv')
>>> {"csv", "dec", "parquet"} <= set(trace_formats())
True
"""

from __future__ import annotations

import importlib
import math
import os
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cqopt.errors import CqoptError, check_regular_file, did_you_mean

if TYPE_CHECKING:
    import pandas as pd

# The modules of the built-in formats, each defining FORMAT; loaded on first use.
BUILTIN_MODULES = (
    "cqopt.replay.trace_dec",
    "cqopt.replay.trace_csv",
    "cqopt.replay.trace_parquet",
)
TS_NAMES = ("ts", "timestamp", "time")  # tried, in order, when nothing names the time column
COMPRESSION = (".gz", ".bz2", ".deflate", ".zst", ".lz4", ".snappy")


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
    format: str | None = None  # dec, csv, parquet or a registered format's name
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


@dataclass(frozen=True)
class StreamSource:
    """How Spark Structured Streaming's file source reads a format's files as they come.

    Parameters
    ----------
    source
        Spark's name of the file source (``"parquet"``, ``"csv"``, ...).
    options
        Its options, as (name, value) pairs (``("header", "true")``, ``("sep", "|")``).
    typed
        The files carry their columns' types (Parquet): Spark reads the schema
        from them; otherwise each column is typed by the catalog.
    """

    source: str
    options: tuple[tuple[str, str], ...] = ()
    typed: bool = False


@dataclass(frozen=True)
class TraceFormat:
    """One trace format: the names its files go by, and its pure-Python reader and writer.

    Parameters
    ----------
    name
        What ``fmt=`` and ``TraceInfo.format`` call it.
    suffixes
        File name endings (lower case, before any compression suffix).
    read
        ``read(path) -> DataFrame``: the file's columns as pandas reads them.
    write
        ``write(frame, path)``: the frame in this format (``path``'s parent exists).
    detect
        ``detect(path) -> bool`` for a file; by default its name ends in a suffix.
    description
        One line for listings and error messages.
    columns
        ``columns(path) -> list of str``: a file's column names without reading
        its rows (a Parquet footer, a CSV header); by default the file is read.
    stream
        How Spark streams the format's files (:class:`StreamSource`); None: not
        streamed, so not written one file per round either.
    """

    name: str
    suffixes: tuple[str, ...]
    read: Callable[[Path], pd.DataFrame]
    write: Callable[[pd.DataFrame, Path], None]
    detect: Callable[[Path], bool] | None = None
    description: str = ""
    columns: Callable[[Path], list[str]] | None = None
    stream: StreamSource | None = None

    def file_columns(self, path: str | Path) -> list[str]:
        """The column names of the file ``path``.

        Raises
        ------
        TraceError
            The file does not read as this format.
        """
        path = Path(path)
        if self.columns is None:
            return [str(c) for c in _read_file(self, path).columns]
        try:
            return [str(c) for c in self.columns(path)]
        except (ValueError, OSError, EOFError, UnicodeDecodeError, zlib.error) as err:
            raise TraceError(str(path), f"not a readable {self.name} file: "
                             f"{_first_line(err)}") from None

    def matches(self, path: str | Path) -> bool:
        """Whether ``path`` is a file of this format."""
        if self.detect is not None:
            return bool(self.detect(Path(path)))
        return _bare_name(Path(str(path).rstrip("/")).name).lower().endswith(self.suffixes)


_FORMATS: dict[str, TraceFormat] = {}
_READERS: dict[tuple[str, str], Callable[..., Any]] = {}  # (format, engine) -> reader
_loaded = False


def _registry() -> dict[str, TraceFormat]:
    global _loaded
    if not _loaded:
        _loaded = True  # first: a format module may itself ask the registry
        for name in BUILTIN_MODULES:
            register_trace_format(importlib.import_module(name).FORMAT, replace=True)
    return _FORMATS


def register_trace_format(fmt: TraceFormat, *, replace: bool = False) -> TraceFormat:
    """Add ``fmt`` to the formats every reader and writer of traces knows.

    Raises
    ------
    ValueError
        A format of that name is registered already and ``replace`` is False.
    """
    formats = _registry()
    if fmt.name in formats and not replace:
        raise ValueError(f"a trace format named {fmt.name!r} is registered already")
    formats[fmt.name] = fmt
    return fmt


def unregister_trace_format(name: str) -> None:
    """Forget the format ``name`` and its engines' readers (a no-op if unknown)."""
    _registry().pop(name, None)
    for key in [k for k in _READERS if k[0] == name]:
        del _READERS[key]


def trace_formats() -> dict[str, TraceFormat]:
    """The registered formats by name, built-in ones first."""
    return dict(_registry())


def streamed_formats() -> dict[str, TraceFormat]:
    """The registered formats Spark streams (and cqopt writes one file per round).

    >>> list(streamed_formats())[:2]
    ['csv', 'parquet']
    """
    return {name: fmt for name, fmt in _registry().items() if fmt.stream is not None}


def register_trace_reader(fmt: str, engine: str, reader: Callable[..., Any]) -> None:
    """Register ``engine``'s reader of the format ``fmt`` (Spark's: see the module docstring)."""
    _READERS[fmt, engine] = reader


def trace_reader(fmt: str, engine: str) -> Callable[..., Any] | None:
    """``engine``'s reader of the format ``fmt``, or None when it reads through pandas."""
    return _READERS.get((fmt, engine))


def get_trace_format(name: str, path: str | Path = "trace") -> TraceFormat:
    """The format called ``name`` (any case).

    Raises
    ------
    TraceError
        No format has that name; the message names ``path``.
    """
    formats = _registry()
    found = formats.get(name.lower())
    if found is None:
        raise TraceError(str(path), f"unknown trace format {name!r}; use one of "
                         f"{', '.join(formats)}{did_you_mean(name, formats)}")
    return found


def detect_trace_format(path: str | Path) -> TraceFormat:
    """The format of the file ``path``, or of the trace files in the directory ``path``.

    A directory's trace files are those not starting with ``.`` or ``_``
    (Spark's ``_SUCCESS`` and ``.crc`` files); they must share one format.

    Raises
    ------
    TraceError
        The name says no format; or the directory holds no trace file, or
        files of several formats.

    Examples
    --------
    >>> detect_trace_format("x/p.parquet").name
    'parquet'
    """
    formats = _registry()
    if os.path.isdir(path):
        names = [p for p in sorted(Path(path).iterdir()) if not p.name.startswith((".", "_"))]
        found = {fmt.name: fmt for p in names for fmt in formats.values()
                 if p.is_file() and fmt.matches(p)}
        if len(found) == 1:
            return found.popitem()[1]
        if found:
            raise TraceError(str(path), f"holds trace files of {len(found)} formats "
                             f"({', '.join(found)}); keep one format per directory")
        raise TraceError(str(path), f"holds no trace file ({len(names)} other entries); a "
                         f"trace file ends in {_suffix_list(formats)}")
    for fmt in formats.values():
        if fmt.matches(path):
            return fmt
    raise TraceError(str(path), f"cannot tell the trace format from the file name (it ends in "
                     f"{_suffix_list(formats)}); pass fmt= one of {', '.join(formats)}")


def trace_format(path: str | Path, fmt: str | None = None) -> str:
    """``fmt`` checked, or the name of the format ``path`` is in.

    >>> trace_format("x/dec-pkt-1.tcp.gz"), trace_format("a.csv.gz"), trace_format("p.parquet")
    ('dec', 'csv', 'parquet')
    """
    if fmt is not None:
        return get_trace_format(fmt, path).name
    return detect_trace_format(path).name


def trace_stem(name: str) -> str | None:
    """A trace file's name without its format (and compression) suffix; None for a name
    that is no trace file's.

    >>> trace_stem("TCP.parquet"), trace_stem("TCP.csv.gz"), trace_stem("TCP.backup.csv")
    ('TCP', 'TCP', 'TCP.backup')
    >>> trace_stem("notes.md") is None
    True
    """
    bare = _bare_name(name)
    low = bare.lower()
    for fmt in _registry().values():
        for suffix in fmt.suffixes:
            if low.endswith(suffix) and len(low) > len(suffix):
                return bare[: -len(suffix)]
    return None


def read_trace_frame(path: str | Path, fmt: str | None = None) -> pd.DataFrame:
    """A trace as pandas reads it, through its format's pure-Python reader.

    A directory's trace files (see :func:`detect_trace_format`) are read in
    name order, one after another.

    Raises
    ------
    TraceError
        No such file, an unknown format, or a file does not read as its format.
    """
    path = Path(path)
    if not path.exists():
        raise TraceError(str(path), "no such file")
    found = get_trace_format(fmt, path) if fmt is not None else detect_trace_format(path)
    files = [p for p in sorted(path.iterdir()) if not p.name.startswith((".", "_"))
             and p.is_file() and found.matches(p)] if path.is_dir() else [path]
    frames = [_read_file(found, file) for file in files]
    if len(frames) == 1:
        return frames[0]
    import pandas as pd  # only here: listing and detecting formats needs no pandas

    return pd.concat(frames, ignore_index=True)


def check_trace_files(path: str | Path, fmt: str | None = None) -> list[Path]:
    """The trace files of ``path`` (a file, or a directory of parts), each checked to be a
    regular, non-empty file whose first bytes are its format's: what Spark would otherwise
    find only after it started.

    A Parquet file must begin and end with ``PAR1``; a text trace (CSV, DEC-PKT)
    must have a first line without NUL bytes. A compressed file is checked for
    being regular and non-empty only.

    Raises
    ------
    TraceError
        Missing, no trace file, a FIFO or device, empty, truncated or not its format.

    Examples
    --------
    >>> import tempfile
    >>> empty = Path(tempfile.mkdtemp()) / "TCP.parquet"
    >>> _ = empty.write_bytes(b"")
    >>> check_trace_files(empty)
    Traceback (most recent call last):
    ...
    cqopt.replay.trace_format.TraceError: ...TCP.parquet: is empty; ...
    """
    path = Path(path)
    if not path.exists():
        raise TraceError(str(path), "no such file or directory")
    found = get_trace_format(fmt, path) if fmt is not None else detect_trace_format(path)
    files = [p for p in sorted(path.iterdir()) if not p.name.startswith((".", "_"))
             and p.is_file() and found.matches(p)] if path.is_dir() else [path]
    for file in files:
        try:
            size = check_regular_file(file, 1 << 50)
        except OSError as err:
            raise TraceError(str(file), f"{err.strerror}; name a trace file") from None
        if size == 0:
            raise TraceError(str(file), "is empty; remove it or write the trace again")
        if _bare_name(file.name) != file.name:
            continue  # compressed: its content is the reader's to judge
        with open(file, "rb") as f:
            head = f.read(1 << 16)
            f.seek(max(size - 4, 0))
            tail = f.read(4)
        if found.name == "parquet" and not (head[:4] == b"PAR1" and tail == b"PAR1"):
            raise TraceError(str(file), "is not a whole Parquet file (no PAR1 at its start "
                             "and end: truncated, or another format); write it again")
        if found.name == "parquet":
            _verify_pages(file)
        if found.name in ("csv", "dec") and not _text_line(head):
            raise TraceError(str(file), f"is not a {found.name} text file (binary bytes in "
                             "its first line)")
    return files


def _verify_pages(file: Path) -> None:
    """Read every page of a Parquet file, checking the CRC of each page that has one
    (cqopt's traces do): a file with flipped bytes is refused, not read as other tuples."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        reader = pq.ParquetFile(file, page_checksum_verification=True)
        for group in range(reader.num_row_groups):
            reader.read_row_group(group)
    except (OSError, pa.ArrowException) as err:
        reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise TraceError(str(file), f"is corrupt ({reason}); write it again") from None


def _text_line(head: bytes) -> bool:
    """Whether the first line of ``head`` is UTF-8 text without NUL bytes."""
    line, newline, _ = head.partition(b"\n")
    try:
        line.decode("utf-8")
    except UnicodeDecodeError as err:
        if newline or err.start < len(line) - 3:  # not merely a character cut at the end
            return False
    return b"\x00" not in line


def _read_file(found: TraceFormat, path: Path) -> pd.DataFrame:
    try:
        check_regular_file(path, 1 << 50)  # a FIFO or device: refused, never waited on
    except OSError as err:
        raise TraceError(str(path), f"{err.strerror}; name a trace file") from None
    try:
        return found.read(path)
    except TraceError:
        raise
    # pandas' ParserError is a ValueError; a truncated .gz an EOFError or zlib.error
    except (ValueError, OSError, EOFError, UnicodeDecodeError, ImportError, zlib.error) as err:
        raise TraceError(str(path), f"not a readable {found.name} file: "
                         f"{_first_line(err)}") from None


def _bare_name(name: str) -> str:
    """``name`` without one compression suffix (``.gz``, ...)."""
    low = name.lower()
    for suffix in COMPRESSION:
        if low.endswith(suffix):
            return name[: -len(suffix)]
    return name


def _suffix_list(formats: dict[str, TraceFormat]) -> str:
    return ", ".join(s for fmt in formats.values() for s in fmt.suffixes)


def _first_line(err: BaseException, limit: int = 300) -> str:
    text = str(err).strip().splitlines()
    line = text[0] if text else type(err).__name__
    return line if len(line) <= limit else line[: limit - 3] + "..."
