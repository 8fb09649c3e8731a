"""The marker of an output directory and its inventory: what cqopt wrote there.

A finished output holds the marker file :data:`MARKER`: its kind, a random id, and the
inventory of every file cqopt wrote there (relative name, size and sha256) and of the
folders it made. Whether a file is cqopt's is decided from the inventory alone.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from cqopt.errors import parse_json, printable
from cqopt.output.atomic import atomic_file

MARKER = ".cqopt"
MARKER_FORMAT = "cqopt-output"
# 1: a marker without an inventory (kind alone); 2: the marker holds the inventory.
MARKER_VERSION = 2
MAX_MARKER = 64 << 20  # an inventory of 100,000 files is a few MB
STAGING, ASIDE, COMPLETE = "staging", "aside", "complete"


@dataclass(frozen=True)
class Marker:
    """What a directory's :data:`MARKER` says: who made it, and (when complete) what it holds.

    ``state`` is ``"staging"`` (a directory being written), ``"aside"`` (the
    hidden folder a two-rename replace parks the previous output in) or
    ``"complete"`` (an output, with its inventory). ``replaces`` records the
    hidden sibling the previous output went to when this one replaced it:
    ``{"aside": name relative to the parent, "id": the previous output's id}``.
    ``folder`` (a staging folder's) is the inode number of the folder cqopt made:
    a copy of the folder, marker and all, has another, so it is not taken for
    cqopt's scratch and removed.
    """

    state: str
    id: str
    kind: str = "output"
    files: dict[str, tuple[int, str]] = field(default_factory=dict)
    dirs: tuple[str, ...] = ()
    replaces: dict[str, str] | None = None
    folder: int | None = None

    def to_json(self) -> str:
        files = {name: {"size": size, "sha256": digest}
                 for name, (size, digest) in sorted(self.files.items())}
        body: dict[str, Any] = {"format": MARKER_FORMAT, "version": MARKER_VERSION,
                                "state": self.state, "kind": self.kind, "id": self.id}
        if self.state == COMPLETE:
            body.update(files=files, dirs=sorted(self.dirs))
        if self.replaces:
            body["replaces"] = dict(self.replaces)
        if self.folder is not None:
            body["folder"] = self.folder
        return json.dumps(body, indent=1, ensure_ascii=True) + "\n"


class MarkerProblem(Exception):
    """Why a directory's marker cannot be trusted (a message for the user)."""


MarkerProblem.__module__ = "cqopt.output"  # its name where users meet it


def _plain_relative(name: object) -> str:
    """``name`` if it is a normalised relative POSIX path inside a directory, else raise."""
    if not isinstance(name, str) or not name or "\x00" in name or "\\" in name:
        raise MarkerProblem(f"its inventory names {printable(name)[:80]!r}")
    parts = PurePosixPath(name).parts
    if name.startswith("/") or any(p in ("", ".", "..") for p in parts) \
            or "/".join(parts) != name or parts[0] == MARKER:
        raise MarkerProblem(f"its inventory names {printable(name)[:80]!r}, not a plain "
                            "relative path")
    return name


def read_marker(directory: Path) -> Marker:
    """The marker of ``directory``, checked.

    Raises
    ------
    MarkerProblem
        No marker, an unreadable one, one from before inventories (version 1), or
        one whose fields are out of their domain.

    Examples
    --------
    >>> import tempfile
    >>> d = Path(tempfile.mkdtemp())
    >>> read_marker(d)
    Traceback (most recent call last):
    ...
    cqopt.output.MarkerProblem: it has no .cqopt marker
    """
    path = Path(directory) / MARKER
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        raise MarkerProblem(f"it has no {MARKER} marker") from None
    except OSError as err:
        raise MarkerProblem(f"its {MARKER} marker is unreadable ({err.strerror})") from None
    if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_MARKER:
        raise MarkerProblem(f"its {MARKER} marker is not a regular file of cqopt's")
    try:
        with open(path, "rb") as f:
            body = parse_json(f.read(MAX_MARKER + 1))
    except (OSError, ValueError) as err:
        raise MarkerProblem(f"its {MARKER} marker is not readable JSON ({err})") from None
    if not isinstance(body, dict) or body.get("format") != MARKER_FORMAT:
        raise MarkerProblem(f"its {MARKER} marker is not cqopt's")
    if body.get("version") != MARKER_VERSION:
        raise MarkerProblem(f"it was written by an older cqopt, whose {MARKER} marker kept no "
                            "inventory of its files")
    state, ident, kind = body.get("state"), body.get("id"), body.get("kind", "output")
    if state not in (STAGING, ASIDE, COMPLETE) or not isinstance(ident, str) or not ident \
            or not isinstance(kind, str):
        raise MarkerProblem(f"its {MARKER} marker is damaged (state, id or kind)")
    files: dict[str, tuple[int, str]] = {}
    dirs: tuple[str, ...] = ()
    if state == COMPLETE:
        raw_files, raw_dirs = body.get("files"), body.get("dirs")
        if not isinstance(raw_files, dict) or not isinstance(raw_dirs, list):
            raise MarkerProblem(f"its {MARKER} marker has no inventory")
        for name, entry in raw_files.items():
            size = entry.get("size") if isinstance(entry, dict) else None
            digest = entry.get("sha256") if isinstance(entry, dict) else None
            if not (isinstance(size, int) and size >= 0 and isinstance(digest, str)
                    and len(digest) == 64):
                raise MarkerProblem(f"its inventory entry {printable(name)[:80]!r} is damaged")
            files[_plain_relative(name)] = (size, digest)
        dirs = tuple(_plain_relative(d) for d in raw_dirs)
    replaces = body.get("replaces")
    if replaces is not None and not (isinstance(replaces, dict)
                                     and all(isinstance(replaces.get(k), str)
                                             for k in ("aside", "id"))):
        raise MarkerProblem(f"its {MARKER} marker is damaged (replaces)")
    folder = body.get("folder")
    if folder is not None and (not isinstance(folder, int) or isinstance(folder, bool)):
        raise MarkerProblem(f"its {MARKER} marker is damaged (folder)")
    return Marker(state, ident, kind, files, dirs, replaces, folder)


def sha256_bytes(data: bytes | memoryview) -> str:
    """The sha256 of ``data``, in hex.

    >>> sha256_bytes(b"")[:12]
    'e3b0c44298fc'
    """
    return hashlib.sha256(data).hexdigest()


def file_digest(path: Path) -> tuple[int, str]:
    """The size and sha256 of the regular file at ``path``, from one open."""
    digest = hashlib.sha256()
    size = 0
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
            size += len(block)
    return size, digest.hexdigest()


def inventory(directory: Path) -> tuple[dict[str, tuple[int, str]], tuple[str, ...]]:
    """Every regular file (size, sha256) and folder under ``directory``, by relative name.

    The marker is left out; symbolic links are not followed and not listed.
    """
    directory = Path(directory)
    files: dict[str, tuple[int, str]] = {}
    dirs: list[str] = []
    for root, subdirs, names in os.walk(directory):
        here = Path(root)
        rel = here.relative_to(directory).as_posix()
        prefix = "" if rel == "." else rel + "/"
        for name in subdirs:
            if not (here / name).is_symlink():
                dirs.append(prefix + name)
        for name in names:
            path = here / name
            if (prefix + name) == MARKER or not stat.S_ISREG(os.lstat(path).st_mode):
                continue
            files[prefix + name] = file_digest(path)
    return files, tuple(dirs)


def _write_marker(directory: Path, marker: Marker) -> None:
    """Write ``directory``'s marker atomically (a reader sees the old one or the new)."""
    with atomic_file(Path(directory) / MARKER) as scratch:
        scratch.write_text(marker.to_json(), encoding="utf-8")


def _unchanged(path: Path, expected: tuple[int, str]) -> bool:
    """Whether ``path`` is still the regular file the inventory lists (size and sha256)."""
    try:
        info = os.lstat(path)
        return (stat.S_ISREG(info.st_mode) and info.st_size == expected[0]
                and file_digest(path) == expected)
    except OSError:
        return False


def changed_files(directory: Path, marker: Marker) -> list[str]:
    """The inventoried files of ``directory`` whose bytes are not what cqopt wrote."""
    return [name for name, expected in sorted(marker.files.items())
            if os.path.lexists(Path(directory) / name)
            and not _unchanged(Path(directory) / name, expected)]
