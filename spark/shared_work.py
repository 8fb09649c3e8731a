"""Exact common subexpressions of several plans' DataFrames, built and computed once.

STREAM shares the common subexpressions of its queries' plans and their
base-stream queues (seed 003, section 3.2). Where a workload run
(:mod:`cqopt.spark.run.workload`) builds every query's chosen plans of a
micro-batch as DataFrames (rounds not held on the driver, or a joint job that
could not run), each its own Spark job; where two of them start from the same
stream's tuples with the same selection and projection, that part is one
DataFrame, built once and computed once.

:class:`SharedWork` is the memo of one micro-batch:

- :meth:`SharedWork.table_frame` hands Spark a stream's tuples held on the
  driver (an Arrow table) once, however many queries read equal tuples
  (equal rows in equal order; compared, not assumed);
- :meth:`SharedWork.derive` gives one DataFrame per *step* over known
  frames (a round's filter, a plan's source, selection, projection, join,
  aggregate or output columns): the step's key is its inputs' keys and the
  step's own signature, so an equal chain of steps over equal tuples is one
  DataFrame object, a whole plan's result included;
- :meth:`SharedWork.begin_part` says whose plan is being built, and
  :meth:`SharedWork.end_part` what it gives, so the memo knows which
  subexpressions more than one result uses, and which plans give one
  result (equal queries: their job runs once, its rows handed to each);
- :meth:`SharedWork.compute_once` persists each step more than one result
  uses, before the jobs run: Spark's cache manager then computes it once and
  every plan reads it (``InMemoryTableScan``); :meth:`SharedWork.release`
  unpersists them after the jobs.

A frame the memo did not make (``derive`` over a foreign DataFrame) is built
as usual, never shared.

>>> shared = SharedWork()
>>> shared.summary()
{'shared_steps': 0, 'uses': 0, 'saved': 0, 'shared_results': 0}
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from cqopt.spark.session import driver_frame

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


@dataclass
class _Entry:
    frame: Any  # DataFrame
    step: bool  # a plan's step (worth persisting when shared), not an input or a filter
    parts: set = field(default_factory=set)


class SharedWork:
    """The memo of one micro-batch's DataFrames; see the module docstring."""

    def __init__(self) -> None:
        self._entries: dict[Hashable, _Entry] = {}
        self._key_of: dict[int, Hashable] = {}  # id(frame) -> its key (frames kept alive)
        self._tables: dict[tuple, list[tuple[Any, Any]]] = {}  # (stream, rows) -> tables
        self._results: dict[Hashable, Hashable] = {}  # part -> the key of what it gives
        self._persisted: list[Any] = []
        # Plans are built from several threads at once, each its own part: one lock over
        # the memo, and a step being built by one thread is waited for by the others.
        self._lock = threading.RLock()
        self._building: dict[Hashable, threading.Event] = {}
        self._local = threading.local()

    @property
    def _part(self) -> Hashable | None:
        return getattr(self._local, "part", None)

    def begin_part(self, part: Hashable) -> None:
        """The plan this thread builds from now on is ``part`` (a query's plan of this
        micro-batch)."""
        self._local.part = part

    def end_part(self, frame: DataFrame) -> None:
        """``frame`` is what the part this thread builds gives (its plan's result)."""
        with self._lock:
            key = self._key_of.get(id(frame))
            if self._part is not None and key is not None:
                self._results[self._part] = key

    def _result(self, part: Hashable) -> Hashable:
        """What ``part`` gives: parts that give one result count as one use."""
        return self._results.get(part, ("part", part))

    def table_frame(self, spark: SparkSession, stream: str, table: Any) -> DataFrame:
        """:func:`~cqopt.spark.session.driver_frame` of ``table``, once per equal table of
        ``stream``."""
        with self._lock:
            bucket = self._tables.setdefault((stream, table.num_rows), [])
            for seen, frame in bucket:
                if seen.equals(table):
                    self._use(self._key_of[id(frame)])
                    return frame
            frame = driver_frame(spark, table)
            key = ("table", stream, table.num_rows, len(bucket))
            bucket.append((table, frame))
            self._remember(key, frame, step=False)
            return frame

    def derive(self, parent: DataFrame | tuple[DataFrame, ...], signature: Hashable,
               build: Callable[[], DataFrame], *, step: bool = True) -> DataFrame:
        """The DataFrame ``build()`` makes from ``parent`` (a join's: a tuple of both), once
        per equal step over equal parents; ``build()`` itself when the memo does not know
        a parent. Safe from several threads: one builds a step, the others wait for it."""
        parents = parent if isinstance(parent, tuple) else (parent,)
        with self._lock:
            keys = tuple(self._key_of.get(id(p)) for p in parents)
        if None in keys:
            return build()
        key = (keys if isinstance(parent, tuple) else keys[0], signature)
        while True:
            with self._lock:
                entry = self._entries.get(key)
                if entry is not None:
                    self._use(key)
                    return entry.frame
                building = self._building.get(key)
                if building is None:  # this thread builds it
                    building = self._building[key] = threading.Event()
                    break
            building.wait()  # another thread's, then look again (it may have failed)
        try:
            frame = build()
            with self._lock:
                if id(frame) not in self._key_of:  # a step that is its input: no entry
                    self._remember(key, frame, step)
        finally:
            with self._lock:
                self._building.pop(key).set()
        return frame

    def _remember(self, key: Hashable, frame: Any, step: bool) -> None:
        self._entries[key] = _Entry(frame, step)
        self._key_of[id(frame)] = key
        self._use(key)

    def _use(self, key: Hashable) -> None:
        if self._part is not None:
            self._entries[key].parts.add(self._part)

    def _uses(self, entry: _Entry) -> int:
        return len({self._result(part) for part in entry.parts})

    def shared(self) -> list[Hashable]:
        """The steps more than one result uses, outermost last."""
        return [key for key, e in self._entries.items() if e.step and self._uses(e) > 1]

    def same_results(self) -> dict[Hashable, Hashable]:
        """Each part whose result an earlier part gives too -> that earlier part."""
        first: dict[Hashable, Hashable] = {}
        same = {}
        for part, key in self._results.items():
            if key in first:
                same[part] = first[key]
            else:
                first[key] = part
        return same

    def compute_once(self) -> int:
        """Persist every step more than one plan uses, so that the job computes it once;
        the number persisted. Call after every plan is built, before the job runs."""
        from pyspark import StorageLevel

        for key in self.shared():  # a shared step inside another is cached too: cheap
            frame = self._entries[key].frame
            frame.persist(StorageLevel.MEMORY_AND_DISK)
            self._persisted.append(frame)
        return len(self._persisted)

    def summary(self) -> dict[str, int]:
        """What was shared: steps used by more than one result, their uses, the
        computations saved (uses beyond the first), and the plans whose whole result
        another's job gives."""
        keys = self.shared()
        uses = sum(self._uses(self._entries[k]) for k in keys)
        return {"shared_steps": len(keys), "uses": uses, "saved": uses - len(keys),
                "shared_results": len(self.same_results())}

    def release(self) -> None:
        """Unpersist what :meth:`compute_once` persisted."""
        for frame in self._persisted:
            frame.unpersist()
        self._persisted.clear()
