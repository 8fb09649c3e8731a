"""OM's utility: one number per plan from output rate, memory and CPU.

``Cost = w_r / C_r + w_m · C_m (+ w_c · CPU)`` (seed 001, section 3.2), lower
is better. A plan whose output rate is 0 (an always-empty selection) has
infinite cost from its rate term whenever ``w_r > 0``.

The paper's own example (section 3.2):

>>> u = Utility(0.1, 0.9)
>>> [round(float(u.of(r, m)), 2) for r, m in ((5.0, 775), (2.5, 575))]
[697.52, 517.54]
>>> [float(Utility(20000, 2).of(r, m)) for r, m in ((5.0, 775), (2.5, 575))]
[5550.0, 9150.0]
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from costmodel.base import Array, PlanCost

DEFAULT_WEIGHTS = (0.4, 0.6)


@dataclass(frozen=True)
class Utility:
    w_r: float = DEFAULT_WEIGHTS[0]
    w_m: float = DEFAULT_WEIGHTS[1]
    w_c: float = 0.0

    def __post_init__(self):
        weights = (self.w_r, self.w_m, self.w_c)
        if not all(np.isfinite(w) and w >= 0 for w in weights) or not any(weights):
            raise ValueError(f"utility weights must be non-negative and not all 0, "
                             f"got {weights}")

    @classmethod
    def from_weights(cls, weights) -> Utility:
        """From ``[w_r, w_m]`` or ``[w_r, w_m, w_c]``."""
        return cls(*(float(w) for w in weights))

    def of(self, rate: ArrayLike, memory: ArrayLike, cpu: ArrayLike = 0.0) -> Array:
        rate = np.asarray(rate, dtype=np.float64)
        with np.errstate(divide="ignore"):
            rate_term = np.where(rate > 0, self.w_r / np.where(rate > 0, rate, 1.0),
                                 np.inf if self.w_r > 0 else 0.0)
        out = rate_term + self.w_m * np.asarray(memory, dtype=np.float64)
        if self.w_c:
            out = out + self.w_c * np.asarray(cpu, dtype=np.float64)
        return out

    def __call__(self, cost: PlanCost) -> Array:
        return self.of(cost.rate, cost.memory, cost.cpu)
