"""Plan charts: build them (locally or on Spark), store them, and look plans up.

The run-time API is ``charts.load(path)`` -> :class:`~cqopt.charts.lookup.ChartSet`,
whose ``choose`` and ``choose_many`` return the chart's plan for given
statistics; :class:`~cqopt.charts.many.Decider` chooses many queries' plans per
round in one call. Importing it loads neither Spark nor matplotlib.
"""

from cqopt.charts.lookup import ChartSet, Choice, Choices, QueryChart, Staleness, load
from cqopt.charts.many import Decider, Decisions
from cqopt.charts.store import ChartSetError

__all__ = ["ChartSet", "ChartSetError", "Choice", "Choices", "Decider", "Decisions", "QueryChart",
           "Staleness", "load"]
