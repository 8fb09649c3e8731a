"""Checks before any work: may cqopt write (or replace) this output at all?

``/``, the home directory and the current directory (and their ancestors) are refused
outright; an existing directory is replaced only with ``--force``, only if its marker
and inventory are cqopt's, of the same kind, and no file cqopt wrote there has changed.
"""

from __future__ import annotations

import os
from pathlib import Path

from cqopt.errors import CqoptError, printable
from cqopt.output.marker import COMPLETE, MARKER, Marker, MarkerProblem, changed_files, \
    read_marker

NAME_MAX = 255  # bytes of one file name on Linux, macOS and Windows file systems
SCRATCH_ROOM = 40  # ".NAME.tmp-<pid>-<id>" adds a dot, ".tmp-", a pid and an 8-letter id


class OutputError(CqoptError):
    """An output directory cannot be written or replaced."""


OutputError.__module__ = "cqopt.output"  # its name where users meet it


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
    shown = ", ".join(printable(n)[:60] for n in names[:5]) + (", ..." if len(names) > 5 else "")
    return f"a directory of {len(names)} entries ({shown})" if names else "an empty directory"


def check_writable(out: Path, force: bool, kind: str = "output") -> Marker | None:
    """Fail before any work if ``out`` exists and may not be replaced, or cannot be made.

    Parameters
    ----------
    out : Path
        The output directory.
    force : bool
        Whether the user asked to replace an existing ``out``.
    kind : str
        What the output is; ``--force`` replaces only an output of the same kind
        (a trace set never replaces a chart set). ``"output"`` checks no kind.

    Returns
    -------
    Marker or None
        The marker of the existing output ``force`` will replace; None if
        ``out`` does not exist.

    Raises
    ------
    OutputError
        ``out`` exists and ``force`` is false; ``out`` is ``/``, the home or
        current directory; ``out`` holds no valid marker and inventory of cqopt's,
        or one of another kind;
        a file cqopt wrote there has changed since; a parent is a file.

    Examples
    --------
    >>> check_writable(Path("/"), force=True)
    Traceback (most recent call last):
    ...
    cqopt.output.OutputError: cannot replace /: it is the root directory; choose another --out
    """
    out = Path(out)
    if len(os.fsencode(out.name)) + SCRATCH_ROOM > NAME_MAX:
        raise OutputError(f"--out {printable(out.name)[:60]}...: a name of "
                          f"{len(os.fsencode(out.name))} bytes; cqopt writes beside it under a "
                          f"name {SCRATCH_ROOM} bytes longer, and a name holds at most "
                          f"{NAME_MAX}: choose a shorter --out")
    try:
        return _check_writable(out, force, kind)
    except OSError as err:
        raise OutputError(f"cannot write {out}: {err.strerror}; choose another --out") from None


def _check_writable(out: Path, force: bool, kind: str) -> Marker | None:
    why = _protected(out)
    if why:
        raise OutputError(f"cannot replace {out}: {why}; choose another --out")
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise OutputError(f"{out} exists and is not a directory; choose another --out")
    for parent in out.parents:
        if parent.exists():
            if not parent.is_dir():
                raise OutputError(f"cannot write {out}: {parent} is a file, not a directory")
            break
    if not out.exists():
        return None
    try:
        marker = read_marker(out)
        if marker.state != COMPLETE:
            raise MarkerProblem(f"its {MARKER} marker is a {marker.state} folder's, not an "
                                "output's")
    except MarkerProblem as problem:
        if "older cqopt" in str(problem):
            raise OutputError(f"{out} exists, and --force replaces only files cqopt listed "
                              f"when it wrote them, but {str(problem).removeprefix('it ')}, "
                              f"so it cannot tell them from yours; check that it holds "
                              f"nothing of yours, remove it by hand (rm -r {out}) and run "
                              "again, or choose another --out") from None
        raise OutputError(f"{out} exists, and --force replaces only output cqopt wrote, but "
                          f"{out} is {_describe(out)}: {problem}; choose another --out (if an "
                          "older cqopt wrote it, check it and remove it by hand)") from None
    if not force:
        raise OutputError(f"{out} already exists; pass --force to replace it")
    if kind != "output" and marker.kind != kind:
        raise OutputError(f"{out} is a {printable(marker.kind)[:40]} cqopt wrote, not a {kind}; "
                          f"--force replaces only a {kind}: choose another --out")
    changed = changed_files(out, marker)
    if changed:
        shown = ", ".join(printable(c)[:80] for c in changed[:3]) + \
            (", ..." if len(changed) > 3 else "")
        raise OutputError(f"--force: {len(changed)} file(s) in {out} changed since cqopt wrote "
                          f"them ({shown}); move them out of {out} or remove them, then run "
                          "again")
    return marker
