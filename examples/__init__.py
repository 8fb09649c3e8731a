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
