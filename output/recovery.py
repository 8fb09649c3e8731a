"""Recovery of what a killed write left beside an output: a previous output put back or
retired, a scratch removed; only what a marker proves is cqopt's is touched.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Callable
from pathlib import Path

from cqopt.errors import printable
from cqopt.output.marker import ASIDE, COMPLETE, MARKER, STAGING, Marker, MarkerProblem, \
    read_marker
from cqopt.output.retire import _retire, _say, _tell_kept


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True
    return True


def _glob_escape(text: str) -> str:
    return "".join(f"[{c}]" if c in "*?[" else c for c in text)


def recover(out: Path, say: Callable[[str], None] = _say) -> list[Path]:
    """Finish what a killed write of ``out`` left: put a previous output back, or retire it.

    Only hidden siblings ``.OUT.tmp-<pid>-<id>`` and ``.OUT.old-<pid>-<id>``
    whose writer is gone are looked at, and only those cqopt can prove it made
    are changed (see the module docstring). The others are kept, named in one line.

    Returns
    -------
    list of Path
        The look-alike siblings kept.
    """
    out = Path(out)
    parent = out.parent
    if not parent.is_dir():
        return []
    try:
        current = read_marker(out) if out.is_dir() else None
    except MarkerProblem:
        current = None
    kept = []
    for role in ("old", "tmp"):
        prefix = f".{out.name}.{role}-"
        for leftover in sorted(parent.glob(_glob_escape(prefix) + "*")):
            pid, _, ident = leftover.name[len(prefix):].partition("-")
            if not pid.isdigit() or _pid_alive(int(pid)):
                continue  # not a writer's name, or a writer still at work
            if role == "tmp" and _empty_dir(leftover):
                continue  # killed between making the scratch and filling it: nothing to keep
            if leftover.is_symlink() or not leftover.is_dir() or not _recover_one(
                    out, leftover, ident, role, current, say):
                kept.append(leftover)
    if kept:
        shown = ", ".join(printable(k.name)[:80] for k in kept[:3]) + \
            (", ..." if len(kept) > 3 else "")
        say(f"cqopt: kept {shown} beside {out}: named like cqopt's scratch, but nothing shows "
            "cqopt made it; if it is not yours, check it and remove it by hand")
    return kept


def _empty_dir(path: Path) -> bool:
    """Remove ``path`` if it is an empty directory (rmdir fails on anything else)."""
    if path.is_symlink() or not path.is_dir():
        return False
    try:
        path.rmdir()
    except OSError:
        return False
    return True


def switching(out: Path) -> bool:
    """Whether a live cqopt process is between the two renames of a replace of ``out``
    (its previous output parked in ``.OUT.old-<pid>-<id>``): ``out`` is back in a moment."""
    out = Path(out)
    prefix = f".{out.name}.old-"
    for parked in out.parent.glob(_glob_escape(prefix) + "*"):
        pid = parked.name[len(prefix):].partition("-")[0]
        if pid.isdigit() and _pid_alive(int(pid)):
            return True
    return False


def _recover_one(out: Path, leftover: Path, ident: str, role: str, current: Marker | None,
                 say: Callable[[str], None]) -> bool:
    """Repair one dead writer's sibling; False if it cannot be proved cqopt's (kept)."""
    try:
        marker = read_marker(leftover)
    except MarkerProblem:
        return False
    relative = leftover.name
    if role == "old":
        if marker.state != ASIDE or marker.id != ident:
            return False
        parked = leftover / "previous"
        if parked.is_dir() and not parked.is_symlink():
            if not os.path.lexists(out):
                with contextlib.suppress(OSError):
                    os.rename(parked, out)  # killed between the two renames: put it back
            else:
                try:
                    previous = read_marker(parked)
                except MarkerProblem:
                    return False
                if current is None or current.replaces != {"aside": f"{relative}/previous",
                                                           "id": previous.id}:
                    return False
                _tell_kept(say, _retire(parked, previous, out), parked, out)
        if parked.exists():
            return True  # what is left in it is named already
        (leftover / MARKER).unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            leftover.rmdir()
        return True
    if marker.id == ident and marker.state == STAGING and \
            marker.folder == os.lstat(leftover).st_ino:
        shutil.rmtree(leftover, ignore_errors=True)  # killed while writing: all of it is ours
        return True
    if marker.id == ident and marker.state == COMPLETE:
        _tell_kept(say, _retire(leftover, marker, None), leftover, out)  # never switched in
        return True
    if marker.state == COMPLETE and current is not None and \
            current.replaces == {"aside": relative, "id": marker.id}:
        _tell_kept(say, _retire(leftover, marker, out), leftover, out)  # switched out
        return True
    return False
