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

from cqopt.errors import CqoptError
from cqopt.runtime.adaptive import AdaptiveQuery, RoundOutcome


@dataclass
class RoundRobin:
    """Runs adaptive queries fairly: FIFO, one round each, re-queued at the back.

    A round its query refuses (:meth:`AdaptiveQuery.step` raises, e.g. on an invalid
    statistic) is recorded in :attr:`refused` as ``(name, error)``; the query stays
    scheduled, so the rounds after it run. A query whose feed ends sits out the rest
    of that run and is scheduled again by the next one.
    """

    queries: dict[str, AdaptiveQuery]
    queue: deque = field(init=False)
    refused: list[tuple[str, CqoptError]] = field(init=False, default_factory=list)

    def __post_init__(self):
        self.queue = deque(self.queries)

    def __repr__(self) -> str:
        refused = f", {len(self.refused)} rounds refused" if self.refused else ""
        return (f"<RoundRobin: {len(self.queries)} queries, next {list(self.queue)[:5]}"
                f"{refused}>")

    def run(self, feeds: Mapping[str, Iterable[Mapping[str, float]]],
            max_rounds: int | None = None) -> list[tuple[str, RoundOutcome]]:
        """Run until every feed is exhausted (or ``max_rounds`` rounds in all, refused
        ones too); the schedule of the rounds run. Refused rounds go to :attr:`refused`.

        >>> from types import SimpleNamespace as Plan
        >>> import numpy as np
        >>> from cqopt.charts.lookup import QueryChart
        >>> from cqopt.charts.spec import Axis, ChartSpec
        >>> spec = ChartSpec("q", "SELECT 1", (Axis("sel.S", 0.0, 1.0, 2),))
        >>> chart = QueryChart(spec, [Plan(id="A"), Plan(id="B")], np.array([0, 1]), None)
        >>> rr = RoundRobin({"a": AdaptiveQuery(chart), "b": AdaptiveQuery(chart)})
        >>> feeds = {"a": [{"sel.S": 0.1}, {"sel.S": 0.2}], "b": [{"sel.S": -3}, {"sel.S": 0.9}]}
        >>> [name for name, _ in rr.run(feeds)], len(rr.refused), list(rr.queue)
        (['a', 'a', 'b'], 1, ['a', 'b'])
        """
        streams = {name: iter(feed) for name, feed in feeds.items()}
        log: list[tuple[str, RoundOutcome]] = []
        ended: list[str] = []
        rounds = 0
        while self.queue and (max_rounds is None or rounds < max_rounds):
            name = self.queue.popleft()
            actual = next(streams[name], None) if name in streams else None
            if actual is None:
                ended.append(name)  # its input has ended: out of this run only
                continue
            rounds += 1
            self.queue.append(name)
            try:
                log.append((name, self.queries[name].step(actual)))
            except CqoptError as error:  # the query is as it was; its next round runs
                self.refused.append((name, error))
        self.queue.extend(ended)
        return log
