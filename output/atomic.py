"""The atomic steps of every write: a file written whole, a directory renamed onto a free
name only, two directories swapped in one system call.

:func:`atomic_file` is the one write-then-rename of cqopt: a file is written under a fresh
scratch name beside its target and renamed onto it, so a reader sees the old file or the
new one, never half of one.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

RENAME_NOREPLACE, RENAME_EXCHANGE = 1, 2
AT_FDCWD = -100


@contextlib.contextmanager
def atomic_file(path: str | os.PathLike, replace: bool = True) -> Iterator[Path]:
    """A scratch path beside ``path`` to write; renamed onto ``path`` when the block ends.

    A failed block (or a killed process) leaves ``path`` as it was; the scratch
    is removed on failure. ``replace=False``: ``path`` must not exist, and one that
    appears meanwhile is not replaced (a ``FileExistsError``).

    >>> import tempfile
    >>> target = Path(tempfile.mkdtemp()) / "table.txt"
    >>> with atomic_file(target) as scratch:
    ...     _ = scratch.write_text("whole")
    >>> target.read_text(), [p.name for p in target.parent.iterdir()]
    ('whole', ['table.txt'])
    """
    path = Path(path)
    fd, scratch = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        yield Path(scratch)
        if replace:
            os.replace(scratch, path)
        else:
            _rename_new(Path(scratch), path)
    except BaseException:
        Path(scratch).unlink(missing_ok=True)
        raise


def write_atomic(path: str | os.PathLike, data: bytes | str) -> Path:
    """Write ``data`` (text as UTF-8) to ``path`` atomically; its folder is made if missing.

    >>> import tempfile
    >>> target = Path(tempfile.mkdtemp()) / "run" / "state.json"
    >>> write_atomic(target, "{}").read_text()
    '{}'
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_file(path) as scratch:
        scratch.write_bytes(data.encode("utf-8") if isinstance(data, str) else data)
    return path


def _renameat2(a: Path, b: Path, flags: int) -> bool:
    """``renameat2(a, b, flags)``; False where the OS has no such call or flag."""
    try:
        call = ctypes.CDLL(None, use_errno=True).renameat2
    except (AttributeError, OSError):
        return False
    call.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p,
                     ctypes.c_uint]
    if call(AT_FDCWD, os.fsencode(a), AT_FDCWD, os.fsencode(b), flags) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.EPERM):
        return False  # this file system or kernel has no such rename
    raise OSError(err, os.strerror(err), str(b))


def _exchange(a: Path, b: Path) -> bool:
    """Atomically swap directories ``a`` and ``b``; False where the OS cannot."""
    if os.environ.get("CQOPT_SWAP") == "renames":
        return False
    return _renameat2(a, b, RENAME_EXCHANGE)


def _rename_new(a: Path, b: Path) -> None:
    """Rename ``a`` to ``b``, which must not exist (an empty directory made meanwhile, or a
    file, is not silently replaced where the OS can refuse)."""
    if not _renameat2(a, b, RENAME_NOREPLACE):
        if os.path.lexists(b):
            raise FileExistsError(errno.EEXIST, "appeared while cqopt was writing", str(b))
        os.rename(a, b)

