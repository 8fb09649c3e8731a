"""Cost models: OM's rate/memory utility and PIPES' (d, l, g) model, vectorized.

Both take a plan and a mapping of statistic names to numpy arrays that
broadcast, and return a :class:`~costmodel.base.PlanCost` of arrays.
:func:`plan_utilities` scores every candidate plan over a grid in one call:
the one kernel that charts, the fidelity replay and ``explain`` share.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from numpy.typing import ArrayLike

from catalog import Catalog
from costmodel.base import MissingStatisticError, OperatorCost, PlanCost
from costmodel.om import OM
from costmodel.pipes import PIPES
from costmodel.utility import DEFAULT_WEIGHTS, Utility

MODELS = {"om": OM, "pipes": PIPES}


def make_model(name: str, catalog: Catalog, memory_unit: str = "bytes"):
    """The cost model called ``name`` ("om" or "pipes") over ``catalog``."""
    if name == "om":
        return OM(catalog, memory_unit=memory_unit)
    if name == "pipes":
        if memory_unit != "bytes":
            raise ValueError("the PIPES model counts memory in bytes only")
        return PIPES(catalog)
    raise ValueError(f"unknown cost model {name!r} (expected om or pipes)")


def plan_utilities(model, utility: Utility, plans: Sequence,
                   stats: Mapping[str, ArrayLike]) -> np.ndarray:
    """Utilities of every plan over the broadcast grid: shape ``(len(plans), *grid)``."""
    scores = [utility(model.cost(plan, stats)) for plan in plans]
    return np.stack(np.broadcast_arrays(*scores))


__all__ = ["DEFAULT_WEIGHTS", "MODELS", "MissingStatisticError", "OM", "OperatorCost", "PIPES",
           "PlanCost", "Utility", "make_model", "plan_utilities"]
