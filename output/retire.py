"""Retiring a previous output by its inventory, and telling the user what was kept.

A file the inventory lists and whose bytes still match is removed; anything else (a
user's file, a changed file, a folder cqopt did not make) is moved into the new output
or kept where it is, and named in one line.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable
from pathlib import Path

from cqopt.errors import printable
from cqopt.output.atomic import _rename_new
from cqopt.output.marker import MARKER, Marker, _unchanged


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _retire(previous: Path, marker: Marker, into: Path | None) -> list[str]:
    """Remove a previous output cqopt wrote, by its inventory; return what was kept.

    A file the inventory lists and whose bytes still match is removed; anything
    else (a user's file, a changed file, a folder cqopt did not make) is moved
    into ``into`` at the same relative name where that name is free, or kept
    where it is. Folders the inventory lists go once empty, then ``previous``.
    """
    kept: list[str] = []
    moved: list[str] = []
    made = set(marker.dirs)

    def visit(folder: Path, rel: str) -> None:
        with os.scandir(folder) as entries:
            children = sorted(entries, key=lambda e: e.name)
        for entry in children:
            name = f"{rel}{entry.name}"
            if name == MARKER:
                continue
            path = Path(entry.path)
            if entry.is_dir(follow_symlinks=False) and name in made:
                visit(path, name + "/")
                continue
            expected = marker.files.get(name)
            if expected is not None and _unchanged(path, expected):
                path.unlink()
                continue
            if into is not None and _move_into(path, into / name):
                moved.append(name)
            else:
                kept.append(name)

    visit(previous, "")
    for name in sorted(made, key=lambda d: d.count("/"), reverse=True):
        with contextlib.suppress(OSError):
            (previous / name).rmdir()  # only if empty: a user's file inside keeps it
    if not kept:
        (previous / MARKER).unlink(missing_ok=True)  # last: a kill before leaves it provable
    with contextlib.suppress(OSError):
        previous.rmdir()
    return [f"{n} (moved into the new output)" for n in moved] + kept


def _move_into(path: Path, target: Path) -> bool:
    """Move ``path`` to ``target`` if that name is free; False if it is taken."""
    try:
        for parent in reversed(target.parents):
            if not parent.exists():
                parent.mkdir()
            elif not parent.is_dir() or parent.is_symlink():
                return False
        _rename_new(path, target)
        return True
    except OSError:
        return False


def _tell_kept(say: Callable[[str], None], kept: list[str], where: Path, into: Path) -> None:
    if not kept:
        return
    moved = [k.removesuffix(" (moved into the new output)") for k in kept
             if k.endswith("(moved into the new output)")]
    stayed = [k for k in kept if not k.endswith("(moved into the new output)")]
    shown = ", ".join(printable(k)[:80] for k in (moved + stayed)[:5]) + \
        (", ..." if len(kept) > 5 else "")
    place = ("moved into the new output" if not stayed else
             f"left in {where} (their names are taken in {into})")
    say(f"cqopt: kept {len(kept)} file{'s' if len(kept) > 1 else ''} cqopt did not write "
        f"(or that changed since), {place}: {shown}")
