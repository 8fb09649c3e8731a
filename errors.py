"""Errors cqopt raises at a user.

Every failure a user can cause (a bad file, a bad query, a bad option) is a
:class:`CqoptError`. Its message says what was wrong, where, and what to do;
the CLI prints it without a traceback and exits with status 2.
"""

from __future__ import annotations

import difflib
import errno
import os
import stat
from collections.abc import Iterable


class CqoptError(Exception):
    """Base class of every error cqopt reports to a user."""


def did_you_mean(name: str, choices: Iterable[str]) -> str:
    """A ``"; did you mean 'X'?"`` suffix naming the closest choice, or ``""``.

    >>> did_you_mean("TPC", ["TCP", "UDP"])
    "; did you mean 'TCP'?"
    """
    by_lower = {c.lower(): c for c in choices}
    close = difflib.get_close_matches(name.lower(), list(by_lower), n=1, cutoff=0.5)
    return f"; did you mean '{by_lower[close[0]]}'?" if close else ""


MAX_TEXT_FILE = 256 << 20  # a catalog, workload or manifest is kilobytes; this is no such file


def read_text_file(path: str | os.PathLike, limit: int = MAX_TEXT_FILE) -> str:
    """The text of a regular file a user named; a FIFO, device or huge file is an OSError.

    Reading a FIFO would wait for a writer forever and ``/dev/zero`` never ends,
    so only regular files are read, and only up to ``limit`` bytes.

    >>> read_text_file("/dev/zero")
    Traceback (most recent call last):
    ...
    OSError: [Errno 22] not a regular file (a FIFO, device or directory): '/dev/zero'
    """
    info = os.stat(path)
    if not stat.S_ISREG(info.st_mode):
        raise OSError(errno.EINVAL, "not a regular file (a FIFO, device or directory)",
                      str(path))
    if info.st_size > limit:
        raise OSError(errno.EFBIG, f"larger than {limit >> 20} MiB", str(path))
    with open(path, encoding="utf-8") as f:
        return f.read(limit + 1)


def printable(text: object) -> str:
    """``text`` on one line with control characters escaped (no raw ESC reaches a terminal).

    >>> printable("bad 'a\\nb\\x1b[31m'")
    "bad 'a\\\\nb\\\\x1b[31m'"
    """
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(text))
