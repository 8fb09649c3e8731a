"""Output directories cqopt writes whole or not at all, and replaces only if it wrote them.

Every output of cqopt (a chart set, a trace set, a fidelity report) is a
directory. It is written into a hidden sibling ``.DIR.tmp-<pid>-*`` and
switched into place at the end, so a failed or killed run never leaves half
an output at ``DIR``.

Replacing (``--force``) is allowed only for a directory cqopt wrote: one
holding the marker file :data:`MARKER` (or a chart set manifest from before
the marker existed). ``/``, the home directory and the current directory
(and their ancestors) are refused outright, whatever they hold.

The switch is **one** system call where the OS allows it:
``renameat2(old, new, RENAME_EXCHANGE)`` (Linux >= 3.15 on ext4, xfs, btrfs,
tmpfs, ...) swaps the new directory and the old one atomically, so at every
instant ``DIR`` is either the complete previous output or the complete new
one; the previous output, now in the hidden sibling, is then deleted. It was
chosen over a symlink ``DIR -> .DIR.v<N>`` because ``DIR`` stays a real
directory, as users, their scripts and existing chart sets expect, and
nothing about reading changes. Where the exchange is unavailable the replace
is two renames (``DIR`` to ``.DIR.old-<pid>-*/previous``, then the new one to
``DIR``); a crash between them is repaired by :func:`recover`, which every
write and every ``load`` calls first: it moves the previous output back.
Leftover hidden siblings of dead runs that carry the marker are removed
then too, so nothing is left behind.

Tests reach the moment between the two steps through the environment:
``CQOPT_SWAP_HOOK=kill`` makes the process SIGKILL itself there, and
``CQOPT_SWAP=renames`` forces the two-rename path.

>>> import tempfile
>>> root = Path(tempfile.mkdtemp())
>>> with staged_directory(root / "out", kind="report") as tmp:
...     _ = (tmp / "report.md").write_text("hello")
>>> sorted(p.name for p in (root / "out").iterdir())
['.cqopt', 'report.md']
>>> with staged_directory(root / "out", force=True, kind="report") as tmp:
...     _ = (tmp / "report.md").write_text("again")
>>> (root / "out" / "report.md").read_text(), sorted(p.name for p in root.iterdir())
('again', ['out'])
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import json
import os
import shutil
import signal
import tempfile
from collections.abc import Iterator
from pathlib import Path

from cqopt.errors import CqoptError

MARKER = ".cqopt"
MARKER_FORMAT = "cqopt-output"
RENAME_EXCHANGE = 2
AT_FDCWD = -100


class OutputError(CqoptError):
    """An output directory cannot be written or replaced."""


def is_cqopt_output(path: Path) -> bool:
    """Whether the directory ``path`` was written by cqopt (its marker, or an old chart set)."""
    path = Path(path)
    try:
        marker = json.loads((path / MARKER).read_text(encoding="utf-8"))
        if isinstance(marker, dict) and marker.get("format") == MARKER_FORMAT:
            return True
    except (OSError, ValueError):
        pass
    try:  # chart sets written before the marker existed
        with open(path / "manifest.json", encoding="utf-8") as f:
            head = f.read(4096)
        return '"format": "cqopt-chart-set"' in head
    except (OSError, ValueError):
        return False


def _protected(out: Path) -> str | None:
    """Why ``out`` may never be replaced, or None."""
    try:
        target = out.resolve()
    except (OSError, RuntimeError):
        return None
    here = Path.cwd().resolve()
    home = Path.home().resolve()
    if target == Path(target.anchor):
        return "it is the root directory"
    if target == home or target in home.parents:
        return "it is your home directory" if target == home else "it holds your home directory"
    if target == here or target in here.parents:
        return ("it is the current directory" if target == here
                else "it holds the current directory")
    return None


def _describe(out: Path) -> str:
    try:
        names = sorted(p.name for p in out.iterdir())
    except OSError:
        return "a directory"
    shown = ", ".join(names[:5]) + (", ..." if len(names) > 5 else "")
    return f"a directory of {len(names)} entries ({shown})" if names else "an empty directory"


def check_writable(out: Path, force: bool, kind: str = "output") -> None:
    """Fail before any work if ``out`` exists and may not be replaced, or cannot be made.

    Raises
    ------
    OutputError
        ``out`` exists and ``force`` is false; ``out`` is ``/``, the home or
        current directory; ``out`` is not something cqopt wrote; a parent is a file.

    Examples
    --------
    >>> check_writable(Path("/"), force=True)
    Traceback (most recent call last):
    ...
    cqopt.charts.staging.OutputError: cannot replace /: it is the root directory; choose another --out
    """
    out = Path(out)
    why = _protected(out)
    if why:
        raise OutputError(f"cannot replace {out}: {why}; choose another --out")
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise OutputError(f"{out} exists and is not a directory; choose another --out")
    if out.exists():
        if not force:
            raise OutputError(f"{out} already exists; pass --force to replace it")
        if not is_cqopt_output(out):
            raise OutputError(f"--force replaces only output cqopt wrote, and {out} is "
                              f"{_describe(out)} without cqopt's {MARKER} marker; "
                              "choose another --out")
    for parent in out.parents:
        if parent.exists():
            if not parent.is_dir():
                raise OutputError(f"cannot write {out}: {parent} is a file, not a directory")
            break


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def recover(out: Path) -> None:
    """Repair what a killed write of ``out`` left: restore a previous output, drop leftovers.

    Only hidden siblings named after ``out`` whose writer process is gone are
    touched, and only those cqopt marked.
    """
    out = Path(out)
    parent = out.parent
    if not parent.is_dir():
        return
    for prefix in (f".{out.name}.old-", f".{out.name}.tmp-"):
        for leftover in sorted(parent.glob(glob_escape(prefix) + "*")):
            pid = leftover.name[len(prefix):].split("-")[0]
            if not pid.isdigit() or _pid_alive(int(pid)) or not leftover.is_dir():
                continue
            previous = leftover / "previous"
            if prefix.endswith("old-"):
                if previous.is_dir() and not out.exists() and is_cqopt_output(previous):
                    with contextlib.suppress(OSError):
                        os.rename(previous, out)  # killed between the two renames
                ours = not previous.exists() or is_cqopt_output(previous)
            else:
                ours = is_cqopt_output(leftover) or not any(leftover.iterdir())
            if ours:
                shutil.rmtree(leftover, ignore_errors=True)


def glob_escape(text: str) -> str:
    return "".join(f"[{c}]" if c in "*?[" else c for c in text)


def _write_marker(directory: Path, kind: str) -> None:
    text = json.dumps({"format": MARKER_FORMAT, "kind": kind})
    (directory / MARKER).write_text(text + "\n", encoding="utf-8")


def _exchange(a: Path, b: Path) -> bool:
    """Atomically swap directories ``a`` and ``b``; False where the OS cannot."""
    if os.environ.get("CQOPT_SWAP") == "renames":
        return False
    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (AttributeError, OSError):
        return False
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p,
                          ctypes.c_uint]
    if renameat2(AT_FDCWD, os.fsencode(a), AT_FDCWD, os.fsencode(b), RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.EPERM):
        return False  # this file system or kernel has no exchange
    raise OSError(err, os.strerror(err), str(b))


def _hook() -> None:
    """The test hook between the two steps of a replace."""
    if os.environ.get("CQOPT_SWAP_HOOK") == "kill":
        os.kill(os.getpid(), signal.SIGKILL)


def _swap_into_place(tmp: Path, out: Path, force: bool, kind: str) -> None:
    if not out.exists():
        os.rename(tmp, out)
        return
    check_writable(out, force, kind)
    if _exchange(tmp, out):
        _hook()  # out is the new output, tmp the previous one
        shutil.rmtree(tmp, ignore_errors=True)
        return
    old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-{os.getpid()}-", dir=out.parent))
    previous = old / "previous"
    os.rename(out, previous)  # the old output stays whole until the new one is in place
    _hook()
    try:
        os.rename(tmp, out)
    except BaseException:
        os.rename(previous, out)
        shutil.rmtree(old, ignore_errors=True)
        raise
    shutil.rmtree(old, ignore_errors=True)  # the new output is in place: drop the previous


@contextlib.contextmanager
def staged_directory(out: Path, force: bool = False, kind: str = "output") -> Iterator[Path]:
    """A hidden temporary sibling of ``out`` to write into, switched into place at the end.

    Parameters
    ----------
    out : Path
        The output directory.
    force : bool
        Replace an existing ``out`` (only one cqopt wrote).
    kind : str
        What the output is ("chart set", "trace set", "report"), recorded in its marker.

    Raises
    ------
    OutputError
        ``out`` may not be written or replaced (see :func:`check_writable`).

    If the block fails, or the process dies, ``out`` is untouched.
    """
    out = Path(out)
    recover(out)
    check_writable(out, force, kind)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-{os.getpid()}-", dir=out.parent))
        umask = os.umask(0)
        os.umask(umask)
        tmp.chmod(0o777 & ~umask)  # mkdtemp's 0700 is for the staging, not the output
    except OSError as err:
        raise OutputError(f"cannot write {out}: {err}") from None
    try:
        _write_marker(tmp, kind)
        yield tmp
        _swap_into_place(tmp, out, force, kind)
    except OSError as err:
        shutil.rmtree(tmp, ignore_errors=True)
        raise OutputError(f"cannot write {out}: {err}") from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
