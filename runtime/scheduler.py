"""A round-robin scheduler for many adaptive queries.

A :class:`RoundRobin` keeps a FIFO queue of queries; each runs one round
and is re-queued at the back, so no query starves another.

>>> from types import SimpleNamespace as Plan
>>> import numpy as np
>>> from cqopt.charts.lookup import QueryChart
>>> from cqopt.charts.spec import Axis, ChartSpec
>>> from cqopt.runtime.adaptive import AdaptiveQuery
>>> spec = ChartSpec("q", "SELECT 1", (Axis("sel.S", 0.0, 1.0, 2),))
>>> chart = QueryChart(spec, [Plan(id="A"), Plan(id="B")], np.array([0, 1]), np.zeros(2))
>>> rr = RoundRobin({"a": AdaptiveQuery(chart), "b": AdaptiveQuery(chart)})
>>> [name for name, _ in rr.run({"a": [{"sel.S": 0.1}] * 2, "b": [{"sel.S": 0.9}]})]
['a', 'b', 'a']
>>> rr.queries["a"]  # each round decided at its own statistics: A, then A again
<AdaptiveQuery q: round 2, plan A, 0 moves, 0 switches>
"""

from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from cqopt.runtime.adaptive import AdaptiveQuery, RoundOutcome


@dataclass
class RoundRobin:
    """Runs adaptive queries fairly: FIFO, one round each, re-queued at the back."""

    queries: dict[str, AdaptiveQuery]
    queue: deque = field(init=False)

    def __post_init__(self):
        self.queue = deque(self.queries)

    def __repr__(self) -> str:
        return f"<RoundRobin: {len(self.queries)} queries, next {list(self.queue)[:5]}>"

    def run(self, feeds: Mapping[str, Iterable[Mapping[str, float]]],
            max_rounds: int | None = None) -> list[tuple[str, RoundOutcome]]:
        """Run until every feed is exhausted (or ``max_rounds`` in all); the schedule."""
        streams = {name: iter(feed) for name, feed in feeds.items()}
        log: list[tuple[str, RoundOutcome]] = []
        while self.queue and (max_rounds is None or len(log) < max_rounds):
            name = self.queue.popleft()
            actual = next(streams[name], None) if name in streams else None
            if actual is None:
                continue  # this query's input has ended: it leaves the queue
            log.append((name, self.queries[name].step(actual)))
            self.queue.append(name)
        return log
