"""What every pipeline of :mod:`cqopt.api` takes: a catalog or workload given as a path or
loaded, and how a message names a parameter.

>>> from cqopt.examples import example
>>> as_catalog(example("dec-pkt.toml")) is not None
True
>>> bare(lambda key, value: f"--{key} {value}", "negotiate")
'--negotiate'
>>> bare(setting_label, "negotiate")
'negotiate'
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from cqopt.catalog import Catalog, load_catalog
from cqopt.charts.settings import setting_label
from cqopt.charts.workload import Workload, load_workload

PathLike = str | os.PathLike
Name = Callable[[str, Any], str]  # how a message names a parameter and its value


def as_catalog(catalog: PathLike | Catalog) -> Catalog:
    """``catalog`` itself, or the catalog its path holds."""
    return catalog if isinstance(catalog, Catalog) else load_catalog(catalog)


def as_workload(workload: PathLike | Workload) -> Workload:
    """``workload`` itself, or the workload its path holds."""
    return workload if isinstance(workload, Workload) else load_workload(workload)


def bare(name: Name, key: str) -> str:
    """A parameter's name alone, as ``name`` spells it (``--negotiate``, ``negotiate``)."""
    return name(key, "").split(" ")[0]


__all__ = ["Name", "PathLike", "as_catalog", "as_workload", "bare", "setting_label"]
