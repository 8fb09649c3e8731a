"""Cost models: OM's rate/memory utility, PIPES' (d, l, g) model and the engine's seconds.

Every model is registered by name (:mod:`cqopt.costmodel.registry`); the
workload, the CLI, chart settings and validation read the registry.

Both take a plan and a mapping of statistic names to numpy arrays that
broadcast, and return a :class:`~cqopt.costmodel.base.PlanCost` of arrays.
:func:`plan_utilities` scores every candidate plan over a grid in one call:
the one kernel that charts, the fidelity replay and ``explain`` share.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from numpy.typing import ArrayLike

from cqopt.costmodel.base import (
    CostModelError,
    MissingStatisticError,
    OperatorCost,
    SCALARS,
    PlanCost,
    is_point,
)
from cqopt.costmodel.engine import Engine
from cqopt.costmodel.om import OM
from cqopt.costmodel.pipes import PIPES
from cqopt.costmodel.point import PointUtilities, point_utilities
from cqopt.costmodel.registry import (
    MODELS,
    Constant,
    CostModel,
    ModelEntry,
    make_model,
    model_entry,
    model_names,
    register_model,
    unregister_model,
)
from cqopt.costmodel.utility import DEFAULT_WEIGHTS, Utility

# The registered models: a new model is one module and one line here. A verdict on a
# chart names the unit its model's cost is in: the engine's is its predicted seconds.
register_model(OM, defaults="the paper's operator rates")
register_model(PIPES, defaults="its default per-operation costs")
register_model(Engine, unit="predicted seconds (engine model)",
               defaults="its default constants, not fitted to this engine")


def plan_utilities(model, utility: Utility, plans: Sequence,
                   stats: Mapping[str, ArrayLike]) -> np.ndarray:
    """Utilities of every plan over the broadcast grid of statistics: the one cost kernel.

    Parameters
    ----------
    model : CostModel
        From :func:`make_model`.
    utility : Utility
        Weights that turn a plan's costs into one number (lower is better).
    plans : sequence of Plan
    stats : mapping of str to array_like
        Statistic name to values; the arrays broadcast together into the grid.

    Returns
    -------
    numpy.ndarray
        Shape ``(len(plans), *grid)``.

    Raises
    ------
    MissingStatisticError
        A plan's cost needs a statistic ``stats`` lacks.
    """
    if plans and is_point(stats) and hasattr(model, "point_cost"):
        # One point: every plan's utility from code generated for the plan set (the same
        # formulas and floats as the grid path, without numpy's per-call overhead, which
        # a handful of plans would not amortise; see cqopt.costmodel.point).
        return point_utilities(model, utility, plans, stats)
    scores = [utility(model.cost(plan, stats)) for plan in plans]
    return np.stack(np.broadcast_arrays(*scores))


__all__ = ["Constant", "CostModel", "CostModelError", "DEFAULT_WEIGHTS", "Engine", "MODELS",
           "MissingStatisticError", "ModelEntry", "OM", "OperatorCost", "PIPES", "PlanCost", "PointUtilities",
           "Utility", "make_model", "model_entry", "model_names", "plan_utilities",
           "register_model", "unregister_model"]
