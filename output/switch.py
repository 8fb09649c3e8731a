"""The switch of a finished directory into place: written in a hidden sibling (or finished
elsewhere and adopted), inventoried, marked, and swapped with the previous output.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

from cqopt.output.atomic import _exchange, _rename_new
from cqopt.output.checks import OutputError, check_writable
from cqopt.output.marker import ASIDE, COMPLETE, MARKER, STAGING, Marker, _write_marker, \
    inventory
from cqopt.output.recovery import recover
from cqopt.output.retire import _retire, _say, _tell_kept


def _hook() -> None:
    """The test hook between the two steps of a replace."""
    if os.environ.get("CQOPT_SWAP_HOOK") == "kill":
        os.kill(os.getpid(), signal.SIGKILL)


def _scratch(out: Path, role: str) -> tuple[Path, str]:
    """A new hidden sibling ``.OUT.<role>-<pid>-<id>`` of ``out``, and its id."""
    prefix = f".{out.name}.{role}-{os.getpid()}-"
    path = Path(tempfile.mkdtemp(prefix=prefix, dir=out.parent))
    return path, path.name[len(prefix):]


@contextlib.contextmanager
def staged_directory(out: Path, force: bool = False, kind: str = "output",
                     say: Callable[[str], None] = _say) -> Iterator[Path]:
    """A hidden temporary sibling of ``out`` to write into, switched into place at the end.

    Parameters
    ----------
    out : Path
        The output directory.
    force : bool
        Replace an existing ``out`` (only one cqopt wrote, and only its own files).
    kind : str
        What the output is ("chart set", "trace set", "report"), recorded in its marker.
    say : callable
        Where the one line about kept files (and kept look-alike folders) goes;
        stderr by default.

    Yields
    ------
    Path
        The directory to write the output into.

    Raises
    ------
    OutputError
        ``out`` may not be written or replaced (see :func:`check_writable`).

    If the block fails, or the process dies, ``out`` is untouched.
    """
    out = Path(out)
    recover(out, say)
    check_writable(out, force, kind)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp, ident = _scratch(out, "tmp")
    except OSError as err:
        raise OutputError(f"cannot write {out}: {err}") from None
    with _removed_on_failure(tmp, out):
        _write_marker(tmp, Marker(STAGING, ident, kind, folder=os.lstat(tmp).st_ino))
        yield tmp
        umask = os.umask(0)
        os.umask(umask)
        tmp.chmod(0o777 & ~umask)  # mkdtemp's 0700 is for the staging, not the output
        _switch_into_place(tmp, ident, out, force, kind, say)


@contextlib.contextmanager
def _removed_on_failure(tmp: Path, out: Path) -> Iterator[None]:
    """Remove the scratch ``tmp`` if the block fails; an OSError becomes one line."""
    try:
        yield
    except OSError as err:
        shutil.rmtree(tmp, ignore_errors=True)
        raise OutputError(f"cannot write {out}: {err}") from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def adopt_directory(finished: Path, out: Path, *, force: bool = False, kind: str = "output",
                    say: Callable[[str], None] = _say, recovered: bool = False) -> Path:
    """Switch a directory this process finished writing elsewhere (a Spark job's output
    folder, say) into place at ``out``, as :func:`staged_directory` does its own.

    ``finished`` must be on the file system of ``out`` (beside it, or in a scratch
    folder of it); it is inventoried and marked, and an existing ``out`` is replaced
    by the rules of ``--force`` (only files cqopt listed, unchanged). If the switch
    fails, ``finished`` is removed, as a failed :func:`staged_directory` removes its own.
    ``recovered`` says the caller has recovered what killed writes left in ``out``'s
    folder already (a run does, once, when it starts): then no sibling is looked for,
    which would list the whole folder on every call.

    Raises
    ------
    OutputError
        ``out`` may not be replaced (see :func:`check_writable`), or a rename failed.

    Examples
    --------
    >>> import tempfile
    >>> root = Path(tempfile.mkdtemp())
    >>> (root / ".scratch-1").mkdir()
    >>> _ = (root / ".scratch-1" / "part-0.parquet").write_bytes(b"rows")
    >>> adopt_directory(root / ".scratch-1", root / "round-0", kind="round result").name
    'round-0'
    >>> sorted(p.name for p in (root / "round-0").iterdir())
    ['.cqopt', 'part-0.parquet']
    >>> sorted(p.name for p in root.iterdir())
    ['round-0']
    """
    finished, out = Path(finished), Path(out)
    if not recovered:
        recover(out, say)
    check_writable(out, force, kind)
    try:
        tmp, ident = _scratch(out, "tmp")
        # Marked before it bears a scratch's name, so a kill before the switch leaves a
        # leftover whose marker proves it is cqopt's (and recovery removes it).
        _write_marker(finished, Marker(STAGING, ident, kind, folder=os.lstat(finished).st_ino))
        os.rename(finished, tmp)  # onto the empty scratch: now it bears a scratch's name
    except OSError as err:
        raise OutputError(f"cannot write {out}: {err}") from None
    with _removed_on_failure(tmp, out):
        _switch_into_place(tmp, ident, out, force, kind, say)
    return out


def _switch_into_place(tmp: Path, ident: str, out: Path, force: bool, kind: str,
                       say: Callable[[str], None]) -> None:
    files, dirs = inventory(tmp)
    if not os.path.lexists(out):
        _write_marker(tmp, Marker(COMPLETE, ident, kind, files, dirs))
        _rename_new(tmp, out)
        return
    previous = check_writable(out, force, kind)  # again: it may have changed meanwhile
    assert previous is not None
    if os.environ.get("CQOPT_SWAP") != "renames":
        mine = Marker(COMPLETE, ident, kind, files, dirs,
                      {"aside": tmp.name, "id": previous.id})
        _write_marker(tmp, mine)
        if _exchange(tmp, out):
            _hook()  # out is the new output, tmp the previous one
            _tell_kept(say, _retire(tmp, previous, out), tmp, out)
            return
    aside, aside_id = _scratch(out, "old")
    _write_marker(aside, Marker(ASIDE, aside_id, kind))
    parked = aside / "previous"
    _write_marker(tmp, Marker(COMPLETE, ident, kind, files, dirs,
                              {"aside": f"{aside.name}/previous", "id": previous.id}))
    os.rename(out, parked)  # the old output stays whole until the new one is in place
    _hook()
    try:
        _rename_new(tmp, out)
    except BaseException:
        os.rename(parked, out)
        (aside / MARKER).unlink(missing_ok=True)
        aside.rmdir()
        raise
    _tell_kept(say, _retire(parked, previous, out), parked, out)
    if not parked.exists():
        (aside / MARKER).unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            aside.rmdir()
