"""Reading one output whole while a rebuild may replace it."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path


class DirectorySnapshot:
    """One output directory as it was when opened: files are read relative to it.

    A rebuild that switches a new output in at the same path does not change
    what this snapshot reads; if the rebuild retires the files under it, a
    read fails and :meth:`is_current` is false: read again from a new snapshot.

    >>> import tempfile
    >>> from cqopt.output import staged_directory
    >>> root = Path(tempfile.mkdtemp())
    >>> with staged_directory(root / "out") as tmp:
    ...     _ = (tmp / "a.txt").write_text("first")
    >>> with DirectorySnapshot(root / "out") as snap:
    ...     with staged_directory(root / "out", force=True) as tmp:
    ...         _ = (tmp / "a.txt").write_text("second")
    ...     snap.is_current()
    False
    """

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        flags = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0)
        self._fd: int | None = os.open(self.path, flags) if _DIR_FD else None
        info = os.fstat(self._fd) if self._fd is not None else os.stat(self.path)
        self.identity = (info.st_dev, info.st_ino)

    def __enter__(self) -> DirectorySnapshot:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def is_current(self) -> bool:
        """Whether the path still names the directory this snapshot reads."""
        try:
            info = os.stat(self.path)
        except OSError:
            return False
        return (info.st_dev, info.st_ino) == self.identity

    def exists(self, name: str) -> bool:
        try:
            os.stat(name, dir_fd=self._fd) if self._fd is not None else \
                os.stat(self.path / name)
            return True
        except OSError:
            return False

    def read_bytes(self, name: str, limit: int) -> bytes:
        """The bytes of the regular file ``name``, from one open.

        Raises
        ------
        OSError
            Missing; a FIFO, device or directory (never waited on); larger than
            ``limit`` bytes.
        """
        flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
        fd = (os.open(name, flags, dir_fd=self._fd) if self._fd is not None
              else os.open(self.path / name, flags))
        with open(fd, "rb", closefd=True) as f:
            info = os.fstat(f.fileno())
            if not stat.S_ISREG(info.st_mode):
                raise OSError(errno.EINVAL, "not a regular file (a FIFO, device or directory)",
                              str(self.path / name))
            if info.st_size > limit:
                raise OSError(errno.EFBIG, f"larger than {limit >> 20} MiB",
                              str(self.path / name))
            data = f.read(limit + 1)
        if len(data) > limit:
            raise OSError(errno.EFBIG, f"larger than {limit >> 20} MiB", str(self.path / name))
        return data


_DIR_FD = os.open in os.supports_dir_fd and os.stat in os.supports_dir_fd
