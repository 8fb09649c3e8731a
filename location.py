"""Where a path or URI a user gives points: this machine's file system, or another one.

Spark reads any Hadoop file system by its URI (``hdfs://``, ``s3a://``, ...):
cqopt hands such a URI to Spark's readers as it is, with no code of its own
per scheme. What cqopt reads or writes itself, on the driver (a run folder
with its state and markers, the files of a directory source that it checks
and watches, a report), must be on this machine: a plain path, or a ``file:``
URI (``file:///abs/path``, or ``file:/abs/path`` as Spark writes one), which
:func:`locate` maps to an absolute local path. A URI of another file system
where a local path is needed is refused in one line that says why and what to
do, never read as a folder of that odd name.

Text is a URI when it starts with a scheme of two or more characters and a
colon, followed by ``/`` (``hdfs://nn/x``, ``s3a://bucket/key``) or any
``file:`` text; anything else is a path (``./hdfs:/x`` is a local folder
``hdfs:``).

>>> locate("file:///tmp/run%201").local
PosixPath('/tmp/run 1')
>>> remote = locate("hdfs://nn:8020/traces/TCP.parquet")
>>> remote.local is None, remote.spark
(True, 'hdfs://nn:8020/traces/TCP.parquet')
>>> locate("s3a://bucket/runs/r1", "--out s3a://bucket/runs/r1",
...        needs_local=("cqopt writes the run folder itself", "give a local folder"))
Traceback (most recent call last):
...
cqopt.errors.CqoptError: --out s3a://bucket/runs/r1: cqopt writes the run folder itself, so it needs a local path or file:///PATH, not an s3a:// URI; give a local folder
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote

from cqopt.errors import CqoptError

_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]+):(.*)", re.DOTALL)
_LOCAL_HOSTS = ("", "localhost")


@dataclass(frozen=True)
class Location:
    """A path or URI as given, judged: ``local`` is its absolute path on this machine,
    or None for a URI of another file system (``scheme``: ``""`` for a plain path)."""

    given: str
    local: Path | None
    scheme: str = ""

    @property
    def spark(self) -> str:
        """What Spark's readers are handed: the absolute local path, or the URI as given
        (Spark's JVM resolves a relative path against its own working directory)."""
        return str(self.local) if self.local is not None else self.given


def is_uri(text: str | os.PathLike) -> bool:
    """Whether ``text`` is a URI (``SCHEME:/...`` or ``file:...``), not a plain path.

    >>> is_uri("file:///tmp/x"), is_uri("hdfs://nn/x"), is_uri("kafka:subscribe=t")
    (True, True, False)
    """
    found = _SCHEME.fullmatch(os.fspath(text))
    return bool(found) and (found[2].startswith("/") or found[1].lower() == "file")


def local_output(out: str | os.PathLike, what: str, where: str | None = None) -> Path:
    """Where cqopt writes ``what`` itself (a chart set, traces, a catalog): ``out`` as a
    local path, a ``file:`` URI mapped to one; another file system's URI is refused in
    one line (never written as a folder of that odd name, ``./file:``).

    >>> local_output("file:///tmp/charts", "chart set")
    PosixPath('/tmp/charts')
    >>> local_output("hdfs://nn/charts", "chart set")
    Traceback (most recent call last):
    ...
    cqopt.errors.CqoptError: --out hdfs://nn/charts: cqopt writes the chart set itself, so it needs a local path or file:///PATH, not an hdfs:// URI; give a local path
    """
    where = f"--out {os.fspath(out)}" if where is None else where
    return locate(out, where, needs_local=(f"cqopt writes the {what} itself",
                                           "give a local path")).local


def locate(text: str | os.PathLike, where: str | None = None, *,
           needs_local: tuple[str, str] | None = None,
           error: type[CqoptError] = CqoptError) -> Location:
    """The location ``text`` names: a plain path or ``file:`` URI on this machine (made
    absolute), else a URI of another file system, left as given for Spark to read.

    Parameters
    ----------
    text : str or path
        A path, or a URI (judged by its text, whatever its type).
    where : str, optional
        How the user gave it, for messages (``--out URI``); default the text itself.
    needs_local : (str, str), optional
        Why this use needs a local path and what to do instead: given, a URI of
        another file system is refused.
    error : type
        The :class:`~cqopt.errors.CqoptError` to raise (a run's own, say).

    Returns
    -------
    Location

    Raises
    ------
    CqoptError
        (``error``) A ``file:`` URI of another host or of a relative path; with
        ``needs_local``, a URI of another file system.

    Examples
    --------
    >>> locate("file:/tmp/a").local, locate("file://localhost/tmp/a").local
    (PosixPath('/tmp/a'), PosixPath('/tmp/a'))
    >>> locate("file://tmp/a")
    Traceback (most recent call last):
    ...
    cqopt.errors.CqoptError: file://tmp/a: a file: URI of host 'tmp', not of this machine; write file:///ABSOLUTE/PATH (three slashes)
    """
    given = os.fspath(text)
    where = given if where is None else where
    if not is_uri(text):
        return Location(given, Path(given).absolute())
    scheme, rest = _SCHEME.fullmatch(given).groups()
    scheme = scheme.lower()
    if scheme != "file":
        if needs_local is not None:
            why, todo = needs_local
            raise error(f"{where}: {why}, so it needs a local path or file:///PATH, not "
                             f"an {scheme}:// URI; {todo}")
        return Location(given, None, scheme)
    host = ""
    if rest.startswith("//"):  # file://HOST/PATH
        host, slash, rest = rest[2:].partition("/")
        rest = slash + rest
    if host.lower() not in _LOCAL_HOSTS:
        raise error(f"{where}: a file: URI of host {host!r}, not of this machine; write "
                         "file:///ABSOLUTE/PATH (three slashes)")
    if not rest.startswith("/"):
        raise error(f"{where}: a file: URI names an absolute path; write "
                         "file:///ABSOLUTE/PATH, or give the path itself")
    return Location(given, Path(unquote(rest)), scheme)
