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

The package's rooms, bottom to top: :mod:`~cqopt.output.atomic` (a file written whole,
the renames), :mod:`~cqopt.output.marker` (the marker and its inventory),
:mod:`~cqopt.output.checks` (may ``DIR`` be written at all),
:mod:`~cqopt.output.retire` (a previous output removed by its inventory),
:mod:`~cqopt.output.recovery` (what a killed write left), :mod:`~cqopt.output.switch`
(:func:`staged_directory` and :func:`adopt_directory`) and
:mod:`~cqopt.output.snapshot` (reading). Every name is imported from ``cqopt.output``.

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

from pathlib import Path  # noqa: F401  (the examples above use it)

from cqopt.output.atomic import atomic_file, write_atomic
from cqopt.output.checks import NAME_MAX, SCRATCH_ROOM, OutputError, check_writable
from cqopt.output.marker import ASIDE, COMPLETE, MARKER, MARKER_FORMAT, MARKER_VERSION, \
    MAX_MARKER, STAGING, Marker, MarkerProblem, changed_files, file_digest, inventory, \
    read_marker, sha256_bytes
from cqopt.output.recovery import recover, switching
from cqopt.output.snapshot import DirectorySnapshot
from cqopt.output.switch import adopt_directory, staged_directory

__all__ = ["ASIDE", "COMPLETE", "MARKER", "MARKER_FORMAT", "MARKER_VERSION", "MAX_MARKER",
           "NAME_MAX", "SCRATCH_ROOM", "STAGING", "DirectorySnapshot", "Marker",
           "MarkerProblem", "OutputError", "adopt_directory", "atomic_file", "changed_files",
           "check_writable", "file_digest", "inventory", "read_marker",
           "recover", "sha256_bytes", "staged_directory", "switching", "write_atomic"]
