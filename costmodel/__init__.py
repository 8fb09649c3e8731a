"""Cost models: OM's rate/memory utility and PIPES' (d, l, g) model, vectorized.

Both take a plan and a mapping of statistic names to numpy arrays that
broadcast, and return a :class:`~cqopt.costmodel.base.PlanCost` of arrays.
:func:`plan_utilities` scores every candidate plan over a grid in one call:
the one kernel that charts, the fidelity replay and ``explain`` share.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from numpy.typing import ArrayLike

from cqopt.catalog import Catalog
from cqopt.costmodel.base import (
    CostModelError,
    MissingStatisticError,
    OperatorCost,
    PlanCost,
)
from cqopt.costmodel.om import OM
from cqopt.costmodel.pipes import PIPES
from cqopt.costmodel.utility import DEFAULT_WEIGHTS, Utility

MODELS: dict[str, type[OM] | type[PIPES]] = {"om": OM, "pipes": PIPES}


def make_model(name: str, catalog: Catalog, memory_unit: str = "bytes") -> OM | PIPES:
    """The cost model called ``name`` ("om" or "pipes") over ``catalog``.

    A :class:`CostModelError` names an unknown model or a memory unit the
    model does not have (PIPES counts bytes only).
    """
    if name not in MODELS:
        raise CostModelError(f"unknown cost model {name!r} (expected "
                             f"{' or '.join(MODELS)})")
    return MODELS[name](catalog, memory_unit=memory_unit)


def plan_utilities(model, utility: Utility, plans: Sequence,
                   stats: Mapping[str, ArrayLike]) -> np.ndarray:
    """Utilities of every plan over the broadcast grid: shape ``(len(plans), *grid)``."""
    scores = [utility(model.cost(plan, stats)) for plan in plans]
    return np.stack(np.broadcast_arrays(*scores))


__all__ = ["CostModelError", "DEFAULT_WEIGHTS", "MODELS", "MissingStatisticError", "OM",
           "OperatorCost", "PIPES", "PlanCost", "Utility", "make_model", "plan_utilities"]
