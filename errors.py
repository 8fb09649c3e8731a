"""Errors cqopt raises at a user.

Every failure a user can cause (a bad file, a bad query, a bad option) is a
:class:`CqoptError`. Its message says what was wrong, where, and what to do;
the CLI prints it without a traceback and exits with status 2.
"""

from __future__ import annotations

import difflib
import errno
import io
import json
import math
import os
import re
import stat
import sys
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


# A number as a user writes one: ASCII digits, a decimal point, an exponent. float()
# alone also takes "nan", "inf", "1_000" and other scripts' digits ("٥" is 5).
DECIMAL = re.compile(r"(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


def parse_number(text: str, what: str, *, integer: bool = False, low: float | None = None,
                 above: float | None = None, high: float | None = None) -> float:
    """The number a user wrote as ``text`` for ``what``, checked; else a CqoptError.

    The one reader of numbers typed on a command line or given as text: an
    optional sign and :data:`DECIMAL` (so no NaN, infinity, underscores or
    non-ASCII digits), finite, a whole number if ``integer`` (returned as an
    int), and within ``low <= x``, ``above < x`` and ``x <= high`` when given.

    >>> parse_number("2.5e3", "--duration"), parse_number("12", "--rows", integer=True)
    (2500.0, 12)
    >>> parse_number("\u0665", "--stat rate.TCP")
    Traceback (most recent call last):
    ...
    cqopt.errors.CqoptError: --stat rate.TCP '٥': expected a number in ASCII digits, e.g. 0.5, 12 or 1e3
    >>> parse_number("-5", "--tolerance-ms", low=0)
    Traceback (most recent call last):
    ...
    cqopt.errors.CqoptError: --tolerance-ms '-5': needs a number >= 0
    """
    where = f"{what} {shorten(text, 40)!r}".lstrip()
    body = text.strip() if isinstance(text, str) else ""
    digits = body[1:] if body[:1] in "+-" else body
    kind = "a whole number" if integer else "a number"
    if not DECIMAL.fullmatch(digits) or (integer and not digits.isdigit()):
        example = "e.g. 12" if integer else "e.g. 0.5, 12 or 1e3"
        raise CqoptError(f"{where}: expected {kind} in ASCII digits, {example}")
    if integer and len(digits) > 18:
        raise CqoptError(f"{where}: the number is too large")
    value = int(body) if integer else float(body)
    if not math.isfinite(value):
        raise CqoptError(f"{where}: the number is too large")
    if low is not None and not value >= low:
        raise CqoptError(f"{where}: needs a number >= {low:g}")
    if above is not None and not value > above:
        raise CqoptError(f"{where}: needs a number > {above:g}")
    if high is not None and not value <= high:
        raise CqoptError(f"{where}: needs a number <= {high:g}")
    return value


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
    with open_regular(path, limit) as f:
        return io.TextIOWrapper(f, encoding="utf-8").read(limit + 1)


def open_regular(path: str | os.PathLike, limit: int,
                 follow: bool = True) -> io.BufferedReader:
    """``path`` opened for reading, checked to be a regular file of at most ``limit`` bytes
    on the open file itself, before a byte is read; else an OSError.

    Opened without waiting (a FIFO does not block the open) and read without
    waiting (``/proc/kmsg``, a regular file with nothing to say yet, fails at
    once instead of blocking); with ``follow=False``, a final symbolic link is
    refused rather than followed.

    >>> open_regular("/dev/zero", 1 << 20)
    Traceback (most recent call last):
    ...
    OSError: [Errno 22] not a regular file (a FIFO, device or directory): '/dev/zero'
    """
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    if not follow:
        flags |= getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(path, flags)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise OSError(errno.EINVAL, "not a regular file (a FIFO, device or directory)",
                          str(path))
        if info.st_size > limit:
            raise OSError(errno.EFBIG, f"larger than {limit >> 20} MiB", str(path))
    except BaseException:
        os.close(fd)
        raise
    return open(fd, "rb")


MAX_JSON_DEPTH = 200  # a manifest, marker or run state nests a few levels, a plan a dozen
MAX_JSON_DIGITS = 40  # a seed or a count; 10^400 is no number cqopt wrote


_JSON_INT_LIMIT = 10 ** MAX_JSON_DIGITS
_LONG_DIGITS = re.compile(r"[0-9]{%d}" % (MAX_JSON_DIGITS + 1))
# Texts up to this size are scanned with numpy (a few arrays of their size); a larger one
# (a marker's inventory, a long run's state) gets the conservative answer, in constant memory.
_SCAN_BYTES = 1 << 20


def _json_float(text: str) -> float:
    digits = text.lstrip("-").partition(".")[0].partition("e")[0].partition("E")[0]
    if len(digits) > MAX_JSON_DIGITS:
        raise ValueError(f"a number of {len(digits):,} digits")
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"the number {text[:40]} is out of range")
    return value


def _json_constant(name: str) -> float:
    raise ValueError(f"{name} is not a JSON number")


def _check_json_tree(value: object, integers: bool) -> None:
    """Every container of parsed JSON at most :data:`MAX_JSON_DEPTH` deep and, with
    ``integers``, every integer of at most :data:`MAX_JSON_DIGITS` digits: one walk, a
    level at a time, no recursion."""
    limit = _JSON_INT_LIMIT
    level, depth = [value], 0
    while level:
        depth += 1
        deeper = []
        for node in level:
            kind = type(node)
            if kind is int:
                if not -limit < node < limit:
                    raise ValueError(f"a number of {len(str(abs(node))):,} digits")
                continue
            if kind is not dict and kind is not list:
                continue
            if depth > MAX_JSON_DEPTH:
                raise ValueError(f"nested deeper than {MAX_JSON_DEPTH} levels")
            children = node.values() if kind is dict else node
            deeper.extend(children if integers else
                          [c for c in children if type(c) is dict or type(c) is list])
        level = deeper


def parse_json(text: str | bytes, nan: bool = False) -> object:
    """JSON as cqopt writes it, strictly: no NaN or Infinity (unless ``nan``: a manifest
    may hold them, for its own checks to judge), no number out of a float's range or of
    more than :data:`MAX_JSON_DIGITS` digits, at most :data:`MAX_JSON_DEPTH` levels of
    nesting. Anything else is a ValueError (never a RecursionError).

    >>> parse_json('{"k": [4, 2.5]}')
    {'k': [4, 2.5]}
    >>> parse_json("[" * 200_000)
    Traceback (most recent call last):
    ...
    ValueError: nested deeper than 200 levels
    >>> parse_json("[" * 201 + "]" * 201)
    Traceback (most recent call last):
    ...
    ValueError: nested deeper than 200 levels
    >>> parse_json('{"lo": 1e400}')
    Traceback (most recent call last):
    ...
    ValueError: the number 1e400 is out of range
    >>> parse_json('{"format": ' + "9" * 5000 + "}")
    Traceback (most recent call last):
    ...
    ValueError: a number of more than 4,300 digits
    >>> parse_json('[' + "9" * 41 + "]")
    Traceback (most recent call last):
    ...
    ValueError: a number of 41 digits
    """
    if isinstance(text, bytes):
        text = text.decode("utf-8")
    # One numpy pass says what the text could hold; json's own parser (C) reads it, with the
    # float hook only where a number could be out of range; then a walk of the value only
    # where the pass found long digit runs or deeper brackets than the nesting allows.
    depth, digits, exponent = _json_scan(text)
    integers = digits > MAX_JSON_DIGITS
    hooked = integers or exponent  # else every number is a finite float of few digits
    try:
        value = json.loads(text, parse_float=_json_float if hooked else None,
                           parse_constant=float if nan else _json_constant)
    except RecursionError:  # deeper than Python's own limit
        raise ValueError(f"nested deeper than {MAX_JSON_DEPTH} levels") from None
    except ValueError as err:
        if "integer string conversion" not in str(err):  # a JSON error, or the hooks'
            raise
        raise ValueError(f"a number of more than {sys.get_int_max_str_digits():,} "
                         "digits") from None
    if integers or depth > MAX_JSON_DEPTH:
        _check_json_tree(value, integers)
    return value


def _json_scan(text: str) -> tuple[int, int, bool]:
    """What JSON ``text`` could hold that :func:`parse_json` refuses, from one pass at
    numpy's speed (a regex search of a plan's text took longer than parsing it): how
    deep its brackets nest outside strings (where a string may hold an escaped quote,
    any backslash, an upper bound: every bracket), its longest run of digits, and
    whether a letter e is followed by a digit or a sign (a float's exponent, maybe).
    The caller walks the parsed value where the figures say it must. A text of more
    than :data:`_SCAN_BYTES` gets upper bounds (every bracket, the float hook on) and a
    regex search for long digit runs, in constant memory.

    >>> _json_scan('{"a": [[1.5e-07], "]]"], "b": 12345}')
    (3, 5, True)
    """
    import numpy as np

    if len(text) > _SCAN_BYTES:
        digits = MAX_JSON_DIGITS + 1 if _LONG_DIGITS.search(text) else 0
        return text.count("[") + text.count("{"), digits, True
    # surrogatepass: a lone surrogate (json.loads takes one) is bytes >= 0x80, none of ours.
    codes = np.frombuffer(text.encode("utf-8", "surrogatepass"), dtype=np.uint8)
    if not len(codes):
        return 0, 0, False
    digit = (codes >= ord("0")) & (codes <= ord("9"))
    breaks = np.flatnonzero(~digit)
    digits = int(np.diff(breaks, prepend=-1, append=len(codes)).max()) - 1
    following = codes[1:]
    exponent = bool((((codes[:-1] | 0x20) == ord("e")) & (digit[1:] | (following == ord("+"))
                                                          | (following == ord("-")))).any())
    opening = (codes == ord("[")) | (codes == ord("{"))
    if "\\" in text:
        return int(opening.sum()), digits, exponent
    # Without escapes, a string is what lies between a quote and the next one.
    outside = np.cumsum(codes == ord('"')) % 2 == 0
    step = opening.astype(np.int32) - ((codes == ord("]")) | (codes == ord("}")))
    return int(np.cumsum(step * outside).max()), digits, exponent


def check_regular_file(path: str | os.PathLike, limit: int) -> int:
    """The size of ``path``, a regular file of at most ``limit`` bytes; else an OSError.

    Checked before a byte is read: a FIFO would wait for a writer forever,
    ``/dev/zero`` never ends, and a huge file would fill the memory.

    >>> check_regular_file("/dev/zero", 1 << 20)
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
    return info.st_size


class LimitedReader(io.RawIOBase):
    """A binary stream that raises an OSError once more than ``limit`` bytes are read.

    Bounds what a compressed file expands to (a gzip of zeros grows a
    thousandfold) where the file's size on disk says nothing.

    >>> reader = io.BufferedReader(LimitedReader(io.BytesIO(b"x" * 10), 4, "f"))
    >>> reader.read()
    Traceback (most recent call last):
    ...
    OSError: [Errno 27] more than 4 bytes (0 MiB) of text: 'f'
    """

    def __init__(self, inner, limit: int, name: str):
        self._inner, self._left, self._limit, self._name = inner, limit, limit, name

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        data = self._inner.read(min(len(buffer), self._left + 1))
        if len(data) > self._left:
            raise OSError(errno.EFBIG, f"more than {self._limit} bytes "
                          f"({self._limit >> 20} MiB) of text", self._name)
        self._left -= len(data)
        buffer[:len(data)] = data
        return len(data)

    def close(self) -> None:
        self._inner.close()
        super().close()


def printable(text: object) -> str:
    """``text`` on one line with control characters escaped (no raw ESC reaches a terminal).

    >>> printable("bad 'a\\nb\\x1b[31m'")
    "bad 'a\\\\nb\\\\x1b[31m'"
    """
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(text))


MAX_QUOTE = 200  # characters of a user's input that an error message quotes
MAX_ERROR_CHARS = 600  # an error line; a longer one is cut in the middle


def shorten(text: object, limit: int = MAX_QUOTE) -> str:
    """``text``, or its first ``limit`` characters with an ellipsis and its length.

    >>> shorten("SELECT " + "x, " * 100, limit=12)
    'SELECT x, x,... (307 characters)'
    """
    text = str(text)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text):,} characters)"


# A quoted stretch of a message: the offending input, as the messages quote it.
_QUOTED = re.compile(r"'([^'\n]{%d,})'" % (MAX_QUOTE + 1))


def error_line(message: object, limit: int = MAX_ERROR_CHARS) -> str:
    """An error message as one line a terminal shows: quoted input shortened, at most ``limit``.

    Each quoted stretch longer than :data:`MAX_QUOTE` is cut (:func:`shorten`);
    a message still longer than ``limit`` keeps its start, which says what was
    wrong, and its end, which says what to do, around a note of what was cut.
    Control characters are escaped (:func:`printable`).

    >>> error_line("bad query '" + "1, " * 100_000 + "': use BETWEEN")[-50:]
    " 1, 1, 1, 1,... (300,000 characters)': use BETWEEN"
    >>> error_line("x" * 1000, limit=60)
    'xxxxxxxxxxxxx... (980 characters cut) ...xxxxxxx'
    """
    text = _QUOTED.sub(lambda m: "'" + shorten(m.group(1)) + "'", str(message))
    text = _cut_middle(text, limit)
    return _cut_middle(printable(text), limit)  # escapes may lengthen it again


def _cut_middle(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    keep = max(limit - 40, 2)  # 40: room for the note of what was cut
    head = keep * 2 // 3
    tail = keep - head
    return (f"{text[:head]}... ({len(text) - head - tail:,} characters cut) ..."
            f"{text[len(text) - tail:]}")
