"""cqopt: a cost-based optimizer for continuous queries, with precomputed plan charts.

The repository's top-level folders are the subpackages of this one package
(``cqopt.catalog``, ``cqopt.optimizer``, ``cqopt.costmodel``,
``cqopt.charts``, ``cqopt.runtime``, ``cqopt.replay``, ``cqopt.spark``,
``cqopt.cli``). What most users need is here:

- :func:`load` reads a chart set (a :class:`ChartSet`, a read-only mapping
  of query names to :class:`QueryChart`) with no Spark, pandas or
  matplotlib in the process;
- :class:`Decider` chooses many queries' plans per round in one call;
- :class:`AdaptiveQuery` runs one query round by round (OM's Algorithm 2);
- :func:`load_catalog` reads a stream catalog;
- :class:`CqoptError` is the one error class every user mistake raises;
- :func:`build`, :func:`generate`, :func:`fidelity` (its settings a
  :class:`FidelityOptions`), :func:`run`, :func:`explain`, :func:`choose`,
  :func:`show` and :func:`calibrate` run the pipelines the ``cqopt``
  commands run (:mod:`cqopt.api`).

Names load lazily, so ``import cqopt`` stays cheap.

>>> import cqopt
>>> cqopt.__version__ == cqopt.version()
True
>>> import cqopt.charts.lookup
>>> cqopt.load is cqopt.charts.lookup.load
True
>>> [n for n in dir(cqopt) if not n.startswith("__")][:4]
['AdaptiveQuery', 'Catalog', 'ChartSet', 'Choice']
"""

from __future__ import annotations

import importlib
from importlib import metadata
from typing import Any

_LAZY = {
    "load": "cqopt.charts.lookup",
    "ChartSet": "cqopt.charts.lookup",
    "QueryChart": "cqopt.charts.lookup",
    "Choice": "cqopt.charts.lookup",
    "Choices": "cqopt.charts.lookup",
    "Decider": "cqopt.charts.many",
    "AdaptiveQuery": "cqopt.runtime.adaptive",
    "Hysteresis": "cqopt.runtime.adaptive",
    "Catalog": "cqopt.catalog.catalog",
    "load_catalog": "cqopt.catalog.catalog",
    "Plan": "cqopt.optimizer.plans.plan",
    "parse_query": "cqopt.optimizer.query.logical",
    "CqoptError": "cqopt.errors",
    "build": "cqopt.api",
    "generate": "cqopt.api",
    "fidelity": "cqopt.api",
    "FidelityOptions": "cqopt.api",
    "run": "cqopt.api",
    "run_workload": "cqopt.api",
    "explain": "cqopt.api",
    "choose": "cqopt.api",
    "show": "cqopt.api",
    "calibrate": "cqopt.api",
}


def version() -> str:
    """The installed distribution's version (``"0+unknown"`` when not installed)."""
    try:
        return metadata.version("cqopt")
    except metadata.PackageNotFoundError:
        return "0+unknown"


__version__ = version()
__all__ = ["__version__", "version", *_LAZY]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'cqopt' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    # The public names and the module's own dunders; not the helpers this file imports.
    return sorted(set(__all__) | {n for n in globals() if n.startswith("__")})
