"""Output directories cqopt writes whole or not at all, and replaces only what it wrote.

Every output of cqopt (a chart set, a trace set, a fidelity report) is a
directory. It is written into a hidden sibling ``.DIR.tmp-<pid>-<id>`` and
switched into place at the end, so a failed or killed run never leaves half
an output at ``DIR``. Single files cqopt writes (a round statistics table, a
run's state) go through :func:`atomic_file` the same way.

**The marker and its inventory.** A finished output holds the marker file
:data:`MARKER`: its kind, a random id, and the inventory of every file cqopt
wrote there (relative name, size and sha256) and of the folders it made.
``--force`` decides from the inventory alone, never from a file's name or
text: it removes a file only if the inventory lists it and its bytes still
match; anything else inside ``DIR`` (a user's ``NOTES.txt``) is moved into
the new output and named in one line on stderr. A directory without a valid
marker and inventory is refused (:func:`check_writable`), and so is one in
which a file cqopt wrote has changed since. Outputs of cqopt before the
inventory existed (a marker without one, or a chart set with no marker) are
refused too, with the advice to check and remove them by hand: nothing tells
their files from a user's. ``/``, the home directory and the current
directory (and their ancestors) are refused outright, whatever they hold.

**The switch** is one system call where the OS allows it:
``renameat2(old, new, RENAME_EXCHANGE)`` (Linux >= 3.15 on ext4, xfs, btrfs,
tmpfs, ...) swaps the new directory and the old one atomically, so at every
instant ``DIR`` is the complete previous output or the complete new one; the
previous one, now in the hidden sibling, is then retired file by file as
above. Elsewhere it is two renames (``DIR`` to ``.DIR.old-<pid>-<id>/previous``,
then the new one to ``DIR``). :func:`recover`, which every write and a
``load`` of a missing chart set call first, finishes what a killed run left:
it puts a previous output back, or retires it. It touches a hidden sibling
only when cqopt can prove the sibling is its own: the sibling's marker
carries the id in its name (cqopt made it), or the output's marker records
that it set the sibling aside with that id. A folder that merely looks like
a leftover is kept and named.

**Reading while a rebuild replaces.** A directory, once switched in at
``DIR``, never changes; it is only retired after it is switched out. A
:class:`DirectorySnapshot` opens ``DIR`` once and reads every file relative
to that open directory, so a reader sees one output whole, and
:meth:`DirectorySnapshot.is_current` tells a reader whose files were retired
under it that it should read again.

Tests reach the moment between the two steps of a replace through the
environment: ``CQOPT_SWAP_HOOK=kill`` makes the process SIGKILL itself there,
and ``CQOPT_SWAP=renames`` forces the two-rename path.

>>> import tempfile
>>> root = Path(tempfile.mkdtemp())
>>> with staged_directory(root / "out", kind="report") as tmp:
...     _ = (tmp / "report.md").write_text("hello")
>>> sorted(p.name for p in (root / "out").iterdir())
['.cqopt', 'report.md']
>>> _ = (root / "out" / "NOTES.txt").write_text("mine")
>>> with staged_directory(root / "out", force=True, kind="report", say=print) as tmp:
...     _ = (tmp / "report.md").write_text("again")
cqopt: kept 1 file cqopt did not write (or that changed since), moved into the new output: NOTES.txt
>>> sorted(p.name for p in (root / "out").iterdir()), sorted(p.name for p in root.iterdir())
(['.cqopt', 'NOTES.txt', 'report.md'], ['out'])
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import hashlib
import json
import os
import shutil
import signal
import stat
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from cqopt.errors import CqoptError, parse_json, printable

MARKER = ".cqopt"
MARKER_FORMAT = "cqopt-output"
# 1: a marker without an inventory (kind alone); 2: the marker holds the inventory.
MARKER_VERSION = 2
MAX_MARKER = 64 << 20  # an inventory of 100,000 files is a few MB
RENAME_NOREPLACE, RENAME_EXCHANGE = 1, 2
AT_FDCWD = -100
STAGING, ASIDE, COMPLETE = "staging", "aside", "complete"
NAME_MAX = 255  # bytes of one file name on Linux, macOS and Windows file systems
SCRATCH_ROOM = 40  # ".NAME.tmp-<pid>-<id>" adds a dot, ".tmp-", a pid and an 8-letter id


class OutputError(CqoptError):
    """An output directory cannot be written or replaced."""


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


# -- the marker and its inventory -----------------------------------------------------
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


# -- checks before any work -----------------------------------------------------------
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


def check_file_target(path: str | os.PathLike, option: str = "--out") -> Path:
    """A file cqopt is asked to write: its folder must exist; nothing is made for it.

    Raises
    ------
    OutputError
        The folder does not exist or is not a directory, or ``path`` is a directory.

    Examples
    --------
    >>> check_file_target("/nonexistent/dir/x.png")
    Traceback (most recent call last):
    ...
    cqopt.output.OutputError: --out /nonexistent/dir/x.png: the folder ... does not exist; ...
    """
    path = Path(path)
    parent = path.parent
    if not parent.exists():
        raise OutputError(f"{option} {path}: the folder {parent} does not exist; create it "
                          "first or choose another path")
    if not parent.is_dir():
        raise OutputError(f"{option} {path}: {parent} is not a directory")
    if path.is_dir():
        raise OutputError(f"{option} {path}: is a directory; name a file")
    return path


# -- writing -------------------------------------------------------------------------
@contextlib.contextmanager
def atomic_file(path: str | os.PathLike) -> Iterator[Path]:
    """A scratch path beside ``path`` to write; renamed onto ``path`` when the block ends.

    A failed block (or a killed process) leaves ``path`` as it was; the scratch
    is removed on failure.

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
        os.replace(scratch, path)
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
    """Rename ``a`` to ``b``, which must not exist (an empty directory made meanwhile is
    not silently replaced where the OS can refuse)."""
    if not _renameat2(a, b, RENAME_NOREPLACE):
        if os.path.lexists(b):
            raise FileExistsError(errno.EEXIST, "appeared while cqopt was writing", str(b))
        os.rename(a, b)


def _hook() -> None:
    """The test hook between the two steps of a replace."""
    if os.environ.get("CQOPT_SWAP_HOOK") == "kill":
        os.kill(os.getpid(), signal.SIGKILL)


def _scratch(out: Path, role: str) -> tuple[Path, str]:
    """A new hidden sibling ``.OUT.<role>-<pid>-<id>`` of ``out``, and its id."""
    prefix = f".{out.name}.{role}-{os.getpid()}-"
    path = Path(tempfile.mkdtemp(prefix=prefix, dir=out.parent))
    return path, path.name[len(prefix):]


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
                    say: Callable[[str], None] = _say) -> Path:
    """Switch a directory this process finished writing elsewhere (a Spark job's output
    folder, say) into place at ``out``, as :func:`staged_directory` does its own.

    ``finished`` must be on the file system of ``out`` (beside it, or in a scratch
    folder of it); it is inventoried and marked, and an existing ``out`` is replaced
    by the rules of ``--force`` (only files cqopt listed, unchanged). If the switch
    fails, ``finished`` is removed, as a failed :func:`staged_directory` removes its own.

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


# -- recovery ------------------------------------------------------------------------
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


# -- reading -------------------------------------------------------------------------
class DirectorySnapshot:
    """One output directory as it was when opened: files are read relative to it.

    A rebuild that switches a new output in at the same path does not change
    what this snapshot reads; if the rebuild retires the files under it, a
    read fails and :meth:`is_current` is false: read again from a new snapshot.

    >>> import tempfile
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
