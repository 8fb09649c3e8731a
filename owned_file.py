"""Single files cqopt writes (a diagram, a calibrated catalog), replaced only if cqopt wrote them.

A directory output proves its files are cqopt's by the inventory in its marker
(:mod:`cqopt.output`). A single file carries its own proof: a signature, the
sha256 of the file's bytes without it, in a place its format ignores (a PNG
``tEXt`` chunk before ``IEND``; a last comment line of an SVG, a PDF or a TOML
file). An existing file is replaced only if its signature matches its bytes:
cqopt wrote it and nobody edited it since. Anything else at the path (a
user's photo, an edited catalog, a symbolic link, a FIFO or a device, the
file the command reads) is refused before any work, in one line that says
what to do.

The write itself goes through :func:`cqopt.output.atomic_file`: a fresh
scratch name beside the target, renamed over it at the end, so a symbolic
link is never followed and a failed write leaves the old file whole.

>>> import tempfile
>>> target = Path(tempfile.mkdtemp()) / "cal.toml"
>>> write_owned(target, b"x = 1\\n").read_bytes().splitlines()[-1][:16]
b'# cqopt-sha256: '
>>> owned_by_cqopt(target.read_bytes())
True
>>> _ = target.write_bytes(target.read_bytes().replace(b"1", b"2", 1))  # a user's edit
>>> check_owned_target(target)
Traceback (most recent call last):
...
cqopt.output.OutputError: --out ...cal.toml: exists and cqopt did not write it (or it was edited since); choose another --out, or move the file away first
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
import struct
import zlib
from collections.abc import Iterable
from pathlib import Path

from cqopt.errors import open_regular
from cqopt.output import OutputError, atomic_file

MAX_OWNED = 256 << 20  # a diagram or a catalog is megabytes at most
KEY = "cqopt-sha256"
_IEND = b"\x00\x00\x00\x00IEND\xaeB`\x82"
_PNG_TEXT = len(KEY) + 1 + 64  # keyword, NUL, hex digest
_PNG_CHUNK = 12 + _PNG_TEXT
# The comment line a text format ends with: its opening and closing.
_PNG = b"\x89PNG\r\n\x1a\n"


def _comment(data: bytes) -> tuple[str, str]:
    """The comment a signature line is written as in ``data``'s format (by its first bytes)."""
    if data.startswith(b"%PDF"):
        return "%", ""
    if data.lstrip()[:5] in (b"<?xml", b"<svg ", b"<!DOC"):
        return "<!-- ", " -->"
    return "# ", ""  # TOML, and any text whose comments start with #


def sign(data: bytes) -> bytes:
    """``data`` with cqopt's signature, in a place its format (a PNG, PDF, SVG, TOML) ignores.

    >>> sign(b"a = 1\\n")[6:22]
    b'# cqopt-sha256: '
    >>> owned_by_cqopt(sign(b"a = 1\\n"))
    True
    """
    if data.startswith(_PNG):
        digest = hashlib.sha256(data).hexdigest()
        if not data.endswith(_IEND):
            raise ValueError("not a PNG image ending in IEND")
        body = KEY.encode() + b"\x00" + digest.encode()
        chunk = struct.pack(">I", len(body)) + b"tEXt" + body + \
            struct.pack(">I", zlib.crc32(b"tEXt" + body))
        return data[:-len(_IEND)] + chunk + _IEND
    opening, closing = _comment(data)
    body = data if data.endswith(b"\n") or not data else data + b"\n"
    return body + f"{opening}{KEY}: {hashlib.sha256(body).hexdigest()}{closing}\n".encode()


def owned_by_cqopt(data: bytes) -> bool:
    """Whether ``data`` carries cqopt's signature and is unchanged since it was signed.

    >>> owned_by_cqopt(b"a = 1\\n")
    False
    """
    if data.startswith(_PNG):
        if len(data) < _PNG_CHUNK + len(_IEND) or not data.endswith(_IEND):
            return False
        chunk = data[-_PNG_CHUNK - len(_IEND):-len(_IEND)]
        head = struct.pack(">I", _PNG_TEXT) + b"tEXt" + KEY.encode() + b"\x00"
        if not chunk.startswith(head):
            return False
        unsigned = data[:-_PNG_CHUNK - len(_IEND)] + _IEND
        return hashlib.sha256(unsigned).hexdigest().encode() == chunk[len(head):len(head) + 64]
    opening, closing = _comment(data)
    size = len(f"{opening}{KEY}: {'0' * 64}{closing}\n".encode())
    line = data[-size:].decode("ascii", "replace")
    if len(data) < size or not line.startswith(f"{opening}{KEY}: "):
        return False
    return hashlib.sha256(data[:-size]).hexdigest() == line[len(opening) + len(KEY) + 2:][:64]


def read_regular(path: str | os.PathLike, limit: int = MAX_OWNED) -> bytes:
    """The bytes of the regular file ``path`` (never a FIFO, device or link), from one open.

    Opened without waiting (a FIFO never blocks) and without following a final
    symbolic link; checked to be a regular file of at most ``limit`` bytes before
    a byte is read.

    Raises
    ------
    OSError
        Missing, a link, not a regular file, or larger than ``limit``.

    Examples
    --------
    >>> read_regular("/dev/zero")
    Traceback (most recent call last):
    ...
    OSError: [Errno 22] not a regular file (a FIFO, device or directory): '/dev/zero'
    """
    with open_regular(path, limit, follow=False) as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise OSError(errno.EFBIG, f"larger than {limit >> 20} MiB", str(path))
    return data


def _same_file(a: Path, b: str | os.PathLike) -> bool:
    try:
        return os.path.samefile(a, b)
    except (OSError, ValueError):
        return False


def check_owned_target(path: str | os.PathLike, option: str = "--out", *,
                       reads: Iterable[str | os.PathLike] = ()) -> Path:
    """Fail before any work unless cqopt may write the file ``path``.

    Its folder must exist (cqopt makes none for a file); ``path`` must be absent,
    or a regular file (not a link, FIFO, device or folder) that cqopt signed and
    nobody changed since, and not one of the files the command ``reads``.

    Raises
    ------
    OutputError
        Why ``path`` may not be written, and what to do.

    Examples
    --------
    >>> check_owned_target("/nonexistent/dir/x.png")
    Traceback (most recent call last):
    ...
    cqopt.output.OutputError: --out /nonexistent/dir/x.png: the folder ... does not exist; ...
    """
    path = Path(path)
    where = f"{option} {path}"
    parent = path.parent
    if not parent.exists():
        raise OutputError(f"{where}: the folder {parent} does not exist; create it first or "
                          "choose another path")
    if not parent.is_dir():
        raise OutputError(f"{where}: {parent} is not a directory; choose another {option}")
    for source in reads:
        if _same_file(path, source):
            raise OutputError(f"{where}: is the file this command reads ({source}); cqopt "
                              f"does not write over its input: choose another {option}")
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return path
    except OSError as err:
        raise OutputError(f"{where}: cannot be checked ({err.strerror}); choose another "
                          f"{option}") from None
    if stat.S_ISLNK(info.st_mode):
        raise OutputError(f"{where}: is a symbolic link; cqopt writes no file through a link: "
                          f"name the file itself or choose another {option}")
    if stat.S_ISDIR(info.st_mode):
        raise OutputError(f"{where}: is a folder; name the file to write")
    if not stat.S_ISREG(info.st_mode):
        raise OutputError(f"{where}: exists and is not a regular file (a FIFO or device); "
                          f"choose another {option}")
    try:
        owned = owned_by_cqopt(read_regular(path))
    except OSError as err:
        raise OutputError(f"{where}: exists and cannot be read ({err.strerror}); choose "
                          f"another {option}") from None
    if not owned:
        raise OutputError(f"{where}: exists and cqopt did not write it (or it was edited "
                          f"since); choose another {option}, or move the file away first")
    return path


def write_owned(path: str | os.PathLike, data: bytes, option: str = "--out", *,
                reads: Iterable[str | os.PathLike] = ()) -> Path:
    """Write ``data``, signed, to ``path`` (checked again by :func:`check_owned_target`).

    Raises
    ------
    OutputError
        ``path`` may not be written, or the write failed (the old file is whole).
    """
    path = check_owned_target(path, option, reads=reads)
    try:
        with atomic_file(path) as scratch:
            scratch.write_bytes(sign(data))
    except OSError as err:
        raise OutputError(f"{option} {path}: cannot be written ({err.strerror or err}); "
                          f"choose another {option}") from None
    return path
