"""OM's utility: one number per plan from output rate, memory and CPU.

``Cost = w_r / C_r + w_m · C_m (+ w_c · CPU)`` (seed 001, section 3.2), lower
is better. A weight of 0 drops its term, even an infinite one (an
``[UNBOUNDED]`` window's memory with ``w_m = 0``): the utility is never NaN.

**Rounds with no output.** Read literally, ``w_r / C_r`` is infinite when a
plan emits nothing (no tuples arrived in the round, or a selection passed
none): every plan then ties at ∞ and the round cannot be scored. Every plan
of a query computes the same tuples, so an output rate of 0 belongs to the
round (or the statistics), not to a plan: the rate term cannot tell plans
apart there and is left out, and memory (and CPU) alone decide
(``zero_output="memory"``, the default). ``zero_output="infinite"`` keeps
the paper's literal reading.

>>> Utility(0.4, 0.6).of([0.0, 0.0], [10.0, 20.0]).tolist()  # memory alone decides
[6.0, 12.0]
>>> Utility(0.4, 0.6, zero_output="infinite").of(0.0, 10.0).tolist()
inf

The paper's own example (section 3.2):

>>> u = Utility(0.1, 0.9)
>>> [round(float(u.of(r, m)), 2) for r, m in ((5.0, 775), (2.5, 575))]
[697.52, 517.54]
>>> [float(Utility(20000, 2).of(r, m)) for r, m in ((5.0, 775), (2.5, 575))]
[5550.0, 9150.0]
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from cqopt.costmodel.base import ARRAYS, Array, CostModelError, PlanCost

DEFAULT_WEIGHTS = (0.4, 0.6)
ZERO_OUTPUT = ("memory", "infinite")
MAX_WEIGHT_SUM = 1e9  # weights are relative: larger ones only overflow a utility


@dataclass(frozen=True)
class Utility:
    w_r: float = DEFAULT_WEIGHTS[0]
    w_m: float = DEFAULT_WEIGHTS[1]
    w_c: float = 0.0
    zero_output: str = "memory"  # "memory" or "infinite": a round with no output, see above

    def __post_init__(self) -> None:
        weights = (self.w_r, self.w_m, self.w_c)
        if not all(np.isfinite(w) and w >= 0 for w in weights) or not any(weights):
            raise CostModelError(f"utility weights must be finite, non-negative and at least "
                                 f"one > 0, got {weights}")
        if not sum(weights) <= MAX_WEIGHT_SUM:  # inf past a float
            raise CostModelError(f"utility weights are relative and sum to at most "
                                 f"{MAX_WEIGHT_SUM:g}, got {weights}; scale them down")
        if self.zero_output not in ZERO_OUTPUT:
            raise CostModelError(f"zero_output={self.zero_output!r}: expected one of "
                                 f"{', '.join(ZERO_OUTPUT)}")

    @classmethod
    def from_weights(cls, weights) -> Utility:
        """From ``[w_r, w_m]`` or ``[w_r, w_m, w_c]``."""
        try:
            values = [float(w) for w in weights]
        except (TypeError, ValueError):
            raise CostModelError(f"utility weights must be numbers, got {weights!r}") from None
        if len(values) not in (2, 3):
            raise CostModelError(f"utility weights are [w_r, w_m] or [w_r, w_m, w_c], "
                                 f"got {len(values)}")
        return cls(*values)

    def of(self, rate: ArrayLike, memory: ArrayLike, cpu: ArrayLike = 0.0,
           xp=ARRAYS) -> Array:
        """The utility of output rate, memory and CPU (arrays that broadcast).

        ``xp=SCALARS`` runs the same formula on Python floats (one plan at one
        point, as :func:`cqopt.costmodel.plan_utilities` does), with numpy's
        result bit for bit.

        >>> from cqopt.costmodel.base import SCALARS
        >>> u = Utility(0.1, 0.9)
        >>> u.of(5.0, 775.0, xp=SCALARS) == float(u.of(5.0, 775.0))
        True
        """
        rate, memory = xp.value(rate), xp.value(memory)
        zero_output = math.inf if self.w_r > 0 and self.zero_output == "infinite" else 0.0
        rate_term = xp.where(rate > 0, xp.divide(self.w_r, xp.where(rate > 0, rate, 1.0)),
                             zero_output)
        # A zero weight drops its term: 0 · ∞ (an unbounded window's memory) is not NaN.
        out = rate_term + (self.w_m * memory if self.w_m else xp.full(memory, 0.0))
        if self.w_c:
            out = out + self.w_c * xp.value(cpu)
        return out

    def __call__(self, cost: PlanCost) -> Array:
        return self.of(cost.rate, cost.memory, cost.cpu)
