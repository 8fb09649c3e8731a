"""The bundled examples, installed with cqopt: catalogs and workloads to start from.

``dec-pkt.toml`` and ``workload.toml`` are the OM paper's DEC-PKT streams
(TCP, UDP, SF) and its two queries; ``epa-http.toml`` and
``epa-workload.toml`` describe the EPA-HTTP web-server log.

>>> from cqopt.examples import example
>>> example("dec-pkt.toml").name
'dec-pkt.toml'
"""

from __future__ import annotations

from pathlib import Path

from cqopt.errors import CqoptError

FOLDER = Path(__file__).resolve().parent


def example(name: str) -> Path:
    """The path of a bundled example file.

    Parameters
    ----------
    name : str
        A file name such as ``"dec-pkt.toml"``.

    Returns
    -------
    Path

    Raises
    ------
    CqoptError
        No bundled example has that name.
    """
    path = FOLDER / name
    if not path.is_file():
        have = ", ".join(sorted(p.name for p in FOLDER.glob("*.toml")))
        raise CqoptError(f"no bundled example {name!r}; there are {have}")
    return path


def resolve(path: str) -> tuple[str, str | None]:
    """``path``, or the bundled example it names when no such file exists here.

    A relative ``examples/NAME`` (as the help examples and the README write
    them) that is not in the current folder, where ``NAME`` is a bundled
    example, is that bundled file; the note says so, in one line. Any other
    path is returned as given, with no note: a missing file is the reader's
    to refuse.

    Parameters
    ----------
    path : str
        A path as the user gave it.

    Returns
    -------
    tuple of (str, str or None)
        The path to read, and the note to print when it is a bundled example.

    >>> import os, tempfile
    >>> here = os.getcwd(); os.chdir(tempfile.mkdtemp())
    >>> found, note = resolve("examples/dec-pkt.toml")
    >>> os.chdir(here)
    >>> found == str(example("dec-pkt.toml")), note.split(":")[0]
    (True, 'examples/dec-pkt.toml is not in this folder')
    >>> resolve("mine/dec-pkt.toml")
    ('mine/dec-pkt.toml', None)
    """
    given = Path(path)
    if given.exists() or given.is_absolute() or given.parts[:-1] != ("examples",) \
            or not (FOLDER / given.name).is_file():
        return path, None
    bundled = FOLDER / given.name
    return str(bundled), (f"{path} is not in this folder: reading the example bundled with "
                          f"cqopt, {bundled}")
