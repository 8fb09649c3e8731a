"""A run's settings, judged once where they are made, and what every room of a run reads.

:class:`RunSettings` holds the values a user chooses for ``cqopt run`` (the
trigger, shadow timing, the estimator and policy, the deadline, ...). It is
frozen and checks every value when it is made, so the rooms of the run read
them without checking again. :class:`RunContext` is what the rooms share:
the Spark session, the query with its chart and catalog, the round length,
the run folder, the settings, and where progress goes.

>>> RunSettings(trigger="2.5").trigger, RunSettings(deadline="trigger", trigger=2.0).deadline
(2.5, 2.0)
>>> RunSettings(estimator="sample:0.1").options["estimator"]
'sample:1'
>>> parse_trigger("available-now"), parse_trigger("2.5")
('available-now', 2.5)
>>> RunSettings(min_kept=2)
Traceback (most recent call last):
...
cqopt.spark.run.settings.StreamingRunError: --min-kept 2: needs a share in [0, 1]
>>> RunSettings(memory_budget=-3)
Traceback (most recent call last):
...
cqopt.spark.run.settings.StreamingRunError: --memory-budget -3: needs a size in bytes > 0
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cqopt.charts.overload_settings import OverloadSettings
from cqopt.errors import CqoptError
from cqopt.runtime.estimators import DEFAULT_ESTIMATOR

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from cqopt.catalog import Catalog
    from cqopt.charts.lookup import QueryChart
    from cqopt.optimizer.query.logical import ContinuousQuery

TRIGGERS = ("once", "available-now")


class StreamingRunError(CqoptError):
    """A streaming run cannot start or continue: bad sources, options or output folder."""


def parse_trigger(text: str) -> str | float:
    """``once``, ``available-now`` or a processing-time interval in seconds."""
    if text in TRIGGERS:
        return text
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not (math.isfinite(seconds) and seconds > 0):
        raise StreamingRunError(f"--trigger {text}: expected once, available-now or a "
                                "positive number of seconds")
    return seconds


@dataclass(frozen=True)
class Tolerance:
    """Measured times within ``relative`` of the fastest, or ``absolute_s`` of it, tie."""

    relative: float = 0.10
    absolute_s: float = 0.05

    def __str__(self) -> str:
        return f"{self.relative:.0%} or {self.absolute_s * 1000:.0f} ms"


def _whole(value: object) -> bool:
    return isinstance(value, int) and value >= 1


@dataclass(frozen=True)
class RunSettings:
    """How one query runs; every value is checked when the settings are made.

    Parameters
    ----------
    window_s : float, optional
        The round length W in seconds; default the query's window
        (:meth:`ContinuousQuery.round_seconds
        <cqopt.optimizer.query.logical.ContinuousQuery.round_seconds>`).
    trigger : {"once", "available-now"}, float or str
        Spark's trigger; a number (or its text) is a processing-time interval in seconds.
    shadow : bool
        Also run every other candidate plan on each round and time it.
    max_rounds : int, optional
        Stop once this many rounds have run in the run folder (earlier runs count).
    max_files_per_trigger : int, optional
        Files per micro-batch of each file source; default every file there is
        (a backlog is one micro-batch, whatever order the files' modification
        times give them).
    estimator, d, decay :
        As :class:`~cqopt.runtime.adaptive.AdaptiveQuery`; the default
        ``"sample"`` chooses each round at its own statistics, measured before
        it runs (the estimators predict only what a round cannot measure), an
        earlier estimator at a prediction from the rounds before.
    policy : Mapping, optional
        More of its options: ``choice``, ``residuals``, ``fallback``,
        ``hysteresis`` (costed with the chart's model on the catalog).
    start : float, optional
        The time of round 0's start; default the first micro-batch's earliest timestamp.
    tolerance : Tolerance
        When a measured time counts as tied with the fastest.
    deadline : float or "trigger", optional
        Seconds a round may take (``"trigger"``: the trigger's interval). Before
        each round its plan's seconds are predicted by the engine model at the
        round's statistics (the catalog's ``[engine]`` constants); a round
        predicted to overrun keeps the largest share ``p`` of each stream's
        tuples that fits, sampled at the inputs (Babcock et al.'s shedder,
        RTStream's early drop), and a COUNT's or SUM's answer is scaled by
        ``1/p``. Each round's log says what was shed.
    min_kept : float
        With ``deadline``: the least share of a round's input kept (its least
        QoS); a round that cannot fit even then runs at it, a miss counted.
    negotiate : bool
        With ``deadline``: per micro-batch, the rounds of every query due share
        the deadline, negotiated to one common QoS level (RTStream §4.3,
        :mod:`cqopt.spark.run.overload`); each query keeps that share of its input.
    shared_shedding : bool
        With ``deadline``: per micro-batch, the COUNT and SUM queries over one
        stream are shed by Babcock, Datar and Motwani's shedders, placed on the
        segments they share (seed 004 §3, :mod:`cqopt.spark.run.shared_shedding`).
    memory_budget : float, optional
        Bytes the queries may hold together: per micro-batch, when the chosen
        plans' memory exceeds it, every window shrinks to one fraction of its
        range ``[window_min · W, W]`` (PIPES §4.3) and a round runs on the tuples
        of its window's last part only.
    window_min : float
        With ``memory_budget``: the smallest window a query accepts, a share of its own.

    Raises
    ------
    StreamingRunError
        A value out of its range.
    """

    window_s: float | None = None
    trigger: str | float = "available-now"
    shadow: bool = False
    max_rounds: int | None = None
    max_files_per_trigger: int | None = None
    estimator: str = DEFAULT_ESTIMATOR
    d: int = 5
    decay: float = 0.5
    policy: Mapping[str, Any] = field(default_factory=dict)
    start: float | None = None
    tolerance: Tolerance = Tolerance()
    deadline: float | str | None = None
    min_kept: float = 0.0
    refresh: int | None = None
    negotiate: bool = False
    shared_shedding: bool = False
    memory_budget: float | None = None
    window_min: float = 0.25

    def __post_init__(self) -> None:
        judged = object.__setattr__
        if self.refresh is not None and not _whole(self.refresh):
            raise StreamingRunError(f"--refresh {self.refresh}: needs a whole number of rounds "
                                    ">= 1 (how often the chart may be rebuilt from the run's "
                                    "rounds)")
        if self.window_s is not None:
            if not (isinstance(self.window_s, (int, float)) and math.isfinite(self.window_s)
                    and self.window_s > 0):
                raise StreamingRunError(f"the round length must be a positive number of "
                                        f"seconds, got {self.window_s!r}")
            judged(self, "window_s", float(self.window_s))
        trigger = self.trigger
        if isinstance(trigger, (int, float)) and not isinstance(trigger, bool):
            trigger = str(trigger)
        judged(self, "trigger", parse_trigger(trigger))
        if self.deadline == "trigger":  # the deadline is the trigger's interval
            if not isinstance(self.trigger, float):
                raise StreamingRunError(f"--deadline trigger: the deadline is the trigger's "
                                        f"interval, but --trigger is {self.trigger}; give "
                                        "--trigger SECONDS or --deadline SECONDS")
            judged(self, "deadline", self.trigger)
        overload = OverloadSettings.judged(
            {"deadline": self.deadline, "min_kept": self.min_kept,
             "memory_budget": self.memory_budget, "window_min": self.window_min},
            lambda key, value: f"--{key.replace('_', '-')} {value}", StreamingRunError)
        for key in ("deadline", "min_kept", "memory_budget", "window_min"):
            judged(self, key, getattr(overload, key))
        if not isinstance(self.negotiate, bool):
            raise StreamingRunError(f"negotiate {self.negotiate!r}: expected True or False")
        if self.negotiate and self.deadline is None:
            raise StreamingRunError("--negotiate: the queries negotiate their shares of a "
                                    "round's deadline, and there is none; give --deadline "
                                    "SECONDS too")
        self._judge_shared_shedding()
        if self.max_rounds is not None and not _whole(self.max_rounds):
            raise StreamingRunError(f"--max-rounds {self.max_rounds}: needs a whole number >= 1")
        if self.max_files_per_trigger is not None and not _whole(self.max_files_per_trigger):
            raise StreamingRunError(f"max_files_per_trigger {self.max_files_per_trigger}: "
                                    "needs a whole number >= 1")
        if self.own_statistics:
            from cqopt.replay.sampling import parse_sample_ratio

            parse_sample_ratio(self.estimator)  # a ratio out of (0, 1] is refused here
        judged(self, "policy", dict(self.policy or {}))

    def _judge_shared_shedding(self) -> None:
        """``--shed-shared`` needs a deadline, and neither a negotiation nor a least share."""
        if not isinstance(self.shared_shedding, bool):
            raise StreamingRunError(f"shared_shedding {self.shared_shedding!r}: expected True "
                                    "or False")
        if not self.shared_shedding:
            return
        if self.deadline is None:
            raise StreamingRunError("--shed-shared: the shedders are placed to meet a round's "
                                    "deadline, and there is none; give --deadline SECONDS too")
        if self.negotiate:
            raise StreamingRunError("--shed-shared and --negotiate both decide what each "
                                    "query keeps of a deadline; give one of them")
        if self.min_kept > 0:
            raise StreamingRunError(f"--min-kept {self.min_kept:g}: with --shed-shared a "
                                    "query's share follows from its error bound, and a least "
                                    "share is no term of it; leave --min-kept out")

    @property
    def own_statistics(self) -> bool:
        """Whether each round is chosen at its own statistics (``sample[:RATIO]``).

        The run reads every tuple of a round before it runs it anyway, so the
        round is measured whole (RTStream's sampler plan, with nothing to save
        by sampling); the estimators still predict what a round cannot measure.
        """
        return self.estimator.startswith("sample")

    @property
    def options(self) -> dict[str, Any]:
        """The policy as the report gives it: the estimator (``sample:1`` for a round's own
        statistics, measured on all its tuples), ``d``, ``decay`` and ``policy``."""
        estimator = "sample:1" if self.own_statistics else self.estimator
        return {"estimator": estimator, "d": self.d, "decay": self.decay, **self.policy}

    @property
    def adaptive_options(self) -> dict[str, Any]:
        """:meth:`AdaptiveQuery.costed <cqopt.runtime.adaptive.AdaptiveQuery.costed>`'s
        options: with a round's own statistics, the estimators predict by OM's decay."""
        return {**self.options, "estimator": "decay" if self.own_statistics else self.estimator}

    def notes(self) -> list[str]:
        """What these settings leave unused, to be said when the run starts."""
        if self.own_statistics and ":" in self.estimator:
            from cqopt.replay.sampling import parse_sample_ratio

            if parse_sample_ratio(self.estimator) < 1.0:
                return [f"note: --estimator {self.estimator}: cqopt run measures each round's "
                        "statistics on all of its tuples (it reads them anyway); the ratio is "
                        "not used"]
        return []


@dataclass(frozen=True)
class RunContext:
    """What every room of one run reads: fixed from the run's start to its end."""

    spark: SparkSession | None
    name: str  # the query's name (its chart's)
    query: ContinuousQuery
    chart: QueryChart
    catalog: Catalog
    settings: RunSettings
    window_s: float  # the round length W
    out: Path  # the run folder, absolute (Spark's JVM resolves paths against its own cwd)
    say: Callable[[str], None]  # one line of progress

    @property
    def streams(self) -> tuple[str, ...]:
        return tuple(self.query.stream_names)
