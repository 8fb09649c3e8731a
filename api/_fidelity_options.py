"""How :func:`cqopt.api.fidelity` replays: its settings in one object, judged once when made.

A :class:`FidelityOptions` holds the k of charts built for the report, the k
sweep, the rounds and queries replayed, the replay's policy (estimator, ...),
the overload settings (a deadline, the share kept, a memory budget, whether
the queries negotiate) and the Spark master. Its constructor judges every
value and refuses a bad one in one line that names it, before anything is
read; ``fidelity`` then reads them without checking again. The overload
settings are judged by :class:`~cqopt.charts.overload_settings.OverloadSettings`,
their one judge.

>>> FidelityOptions(k_sweep=[2, 10], deadline=0.8).k_sweep
(2, 10)
>>> FidelityOptions().replay_options["estimator"]  # the default, said
'sample'
>>> FidelityOptions(min_kept=2)
Traceback (most recent call last):
...
cqopt.errors.CqoptError: min_kept = 2: needs a share in [0, 1]
>>> FidelityOptions(k=0, name=lambda key, value: f"--{key} {value}")
Traceback (most recent call last):
...
cqopt.errors.CqoptError: --k 0: must be a whole number >= 1
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import Any

from cqopt.api._common import Name, bare
from cqopt.charts.overload_settings import DELTA, OverloadSettings
from cqopt.charts.settings import judge_settings, setting_label
from cqopt.errors import CqoptError, did_you_mean
from cqopt.runtime.estimators import DEFAULT_ESTIMATOR

DEFAULT_K_SWEEP = (2, 5, 10, 20, 40)
# replay()'s parameters that are not a policy: what it replays, and what fidelity gives it.
_NOT_REPLAY_OPTIONS = ("name", "chart", "catalog", "observed", "utilities")


@dataclass(frozen=True)
class FidelityOptions:
    """The settings of :func:`cqopt.api.fidelity`, each judged when the object is made.

    Parameters
    ----------
    k : int, optional
        The k of charts built for the report (not with ``fidelity(charts=...)``).
    k_sweep : sequence of int
        The k values to sweep (empty: no sweep); kept as a tuple.
    rounds : int, optional
        Cut each trace into this many rounds instead of the query's window.
    queries : sequence of str, optional
        The workload's queries to replay (default: every one with traces of all
        its streams).
    replay_options : mapping, optional
        :func:`cqopt.replay.replay.replay`'s keyword arguments (seed, estimator, d,
        decay, choice, residuals, fallback, hysteresis, off_chart). The estimator
        defaults to ``"sample"`` (:data:`cqopt.runtime.estimators.DEFAULT_ESTIMATOR`,
        which says why): each round decided at its own statistics as a sampler of
        10% of its tuples measures them. Kept read-only, the default filled in.
    describe : mapping of str to str, optional
        More lines for the report's header (the policy, in words).
    master : str
        A running Spark session of this process, else a new one on this master URL.
    deadline : float, optional
        Seconds each round may take: each query's chosen plans are predicted by the
        engine model and each round shed at its inputs to fit
        (:func:`cqopt.replay.overload.deadline_replay`), reported beside the run
        without shedding (``summary["deadline"]``, the rounds table's ``kept``,
        ``missed_with``, ... columns). Default: each query's own ``deadline`` in the
        workload, if it has one.
    min_kept : float, optional
        The least share of a round's input kept, in [0, 1]; default each query's
        ``min_kept`` in the workload, else 0. A query's ``error_bound`` counts the
        rounds whose promised error exceeds it.
    delta : float, optional
        With a deadline: the confidence ``1 - delta`` of a COUNT's promised error
        (default :data:`~cqopt.charts.overload_settings.DELTA`, 0.01). ``fidelity``
        refuses ``min_kept`` and ``delta`` when no deadline applies: neither
        ``deadline`` nor a replayed query's own in the workload.
    memory_budget : float, optional
        Bytes the replayed queries may hold together: PIPES' resource manager shrinks
        every query's window to the same fraction of its range ``[window_min · W, W]``
        in the rounds that would exceed it (:func:`cqopt.replay.overload.memory_replay`,
        ``summary["memory"]`` of each query).
    window_min : float
        With ``memory_budget``: the smallest window a query accepts, as a share of its own.
    negotiate : bool
        With ``deadline``: the replayed queries also share each round's deadline on one
        engine, and RTStream's inter-query negotiation lowers their common QoS level until
        every one fits (:func:`cqopt.replay.overload.negotiated_replay`,
        ``summary["negotiation"]``).
    name : callable
        Not a setting: ``name(parameter, value)`` names a parameter in messages
        (default ``k = 0``; the command line's ``--k 0``).

    Raises
    ------
    CqoptError
        A value out of its range or of the wrong kind, named by ``name``, in one line.
    """

    k: int | None = None
    k_sweep: Sequence[int] = DEFAULT_K_SWEEP
    rounds: int | None = None
    queries: Sequence[str] | None = None
    replay_options: Mapping[str, Any] | None = None
    describe: Mapping[str, str] | None = None
    master: str = "local[*]"
    deadline: float | None = None
    min_kept: float | None = None
    delta: float | None = None
    memory_budget: float | None = None
    window_min: float = 0.25
    negotiate: bool = False
    name: Name = field(default=setting_label, repr=False, compare=False)

    def __post_init__(self) -> None:
        name = self.name
        if self.rounds is not None and not _at_least_one(self.rounds):
            raise CqoptError(f"{name('rounds', self.rounds)}: needs a number >= 1")
        if self.negotiate and self.deadline is None:
            raise CqoptError(f"{bare(name, 'negotiate')}: the queries negotiate to share a "
                             "deadline; give the deadline too")
        self._judge_overload()
        if self.k is not None:
            self._set("k", judge_settings({"k": self.k}, name, CqoptError)["k"])
        self._set("k_sweep", _judged_sweep(self.k_sweep, name))
        if self.queries is not None:
            if isinstance(self.queries, str) or not all(isinstance(q, str)
                                                        for q in self.queries):
                raise CqoptError(f"{name('query', self.queries)}: expected a list of the "
                                 "workload's query names")
            self._set("queries", tuple(self.queries))
        self._set("replay_options", _judged_replay_options(self.replay_options, name))
        if self.describe is not None and not isinstance(self.describe, Mapping):
            raise CqoptError(f"{name('describe', self.describe)}: expected a mapping of "
                             "header lines, e.g. {'estimator': 'decay'}")
        self._set("describe", MappingProxyType(dict(self.describe or {})))
        if not isinstance(self.master, str) or not self.master:
            raise CqoptError(f"{name('master', self.master)}: expected a Spark master URL, "
                             "e.g. local[*]")

    def _judge_overload(self) -> None:
        """Deadline, share kept, delta, budget and smallest window, by their one judge; the
        values it normalises (floats) kept. ``delta`` is judged with a deadline's settings,
        ``window_min`` with a budget, as each is used."""
        given: dict[str, Any] = {"deadline": self.deadline, "min_kept": self.min_kept}
        if self.deadline is not None or self.min_kept is not None or self.delta is not None:
            given["delta"] = DELTA if self.delta is None else self.delta
        if self.memory_budget is not None:
            given.update(memory_budget=self.memory_budget, window_min=self.window_min)
        judged = OverloadSettings.judged(given, self.name, CqoptError)
        for key, value in given.items():
            if key != "delta" and value is not None:
                self._set(key, getattr(judged, key))
        if self.delta is not None:
            self._set("delta", judged.delta)

    def _set(self, key: str, value: Any) -> None:
        object.__setattr__(self, key, value)  # frozen: the judged value, once, here

    @property
    def replay_delta(self) -> float:
        """The confidence parameter a deadline's replay uses: ``delta``, else DELTA."""
        return DELTA if self.delta is None else self.delta


def option_names() -> tuple[str, ...]:
    """The settings a :class:`FidelityOptions` holds (every field but ``name``).

    >>> option_names()[:3]
    ('k', 'k_sweep', 'rounds')
    """
    return tuple(f.name for f in fields(FidelityOptions) if f.name != "name")


def gathered(options: FidelityOptions | None, settings: Mapping[str, Any],
             name: Name) -> FidelityOptions:
    """``options``, or the :class:`FidelityOptions` that keyword ``settings`` make; both
    given, or a keyword that is no setting, refused in one line.

    >>> gathered(None, {"k": 4}, setting_label).k
    4
    >>> gathered(FidelityOptions(), {"k": 4}, setting_label)
    Traceback (most recent call last):
    ...
    cqopt.errors.CqoptError: k = 4 is given beside options=, which holds every setting: set k in the FidelityOptions (dataclasses.replace(options, k=...)), or leave options out
    """
    known = option_names()
    for key in settings:
        if key not in known:
            raise CqoptError(f"{key}: not a setting of fidelity{did_you_mean(key, known)} "
                             f"(they are {', '.join(known)})")
    if options is None:
        return FidelityOptions(**settings, name=name)
    if not isinstance(options, FidelityOptions):
        raise CqoptError(f"{name('options', options)}: expected a FidelityOptions")
    if settings:
        key = next(iter(settings))
        raise CqoptError(f"{name(key, settings[key])} is given beside options=, which holds "
                         f"every setting: set {key} in the FidelityOptions "
                         f"(dataclasses.replace(options, {key}=...)), or leave options out")
    return options


def _at_least_one(value: Any) -> bool:
    try:
        return not isinstance(value, bool) and value >= 1
    except TypeError:  # not a number
        return False


def _judged_sweep(k_sweep: Any, name: Name) -> tuple[int, ...]:
    """Each k of the sweep judged as a chart's k, named as the sweep was given."""
    if isinstance(k_sweep, (str, bytes)) or not isinstance(k_sweep, Iterable):
        raise CqoptError(f"{name('k_sweep', k_sweep)}: expected a list of whole numbers "
                         ">= 1, e.g. [2, 5, 10], or [] for no sweep")
    values = tuple(k_sweep)
    swept = name("k_sweep", ",".join(map(str, values)))
    return tuple(judge_settings({"k": value}, lambda _, v: f"{swept}: k = {v}",
                                CqoptError)["k"] for value in values)


def _judged_replay_options(given: Mapping[str, Any] | None, name: Name
                           ) -> Mapping[str, Any]:
    """The replay's keyword arguments, each a parameter of
    :func:`cqopt.replay.replay.replay`, with the default estimator filled in."""
    if given is not None and not isinstance(given, Mapping):
        raise CqoptError(f"{name('replay_options', given)}: expected a mapping of replay "
                         "settings, e.g. {'estimator': 'decay', 'd': 5}")
    if given:
        from cqopt.replay.replay import replay

        known = [p for p in inspect.signature(replay).parameters
                 if p not in _NOT_REPLAY_OPTIONS]
        for key in given:
            if key not in known:
                raise CqoptError(f"{name('replay_options', key)}: not a setting of a replay"
                                 f"{did_you_mean(str(key), known)} (they are "
                                 f"{', '.join(known)})")
    return MappingProxyType({"estimator": DEFAULT_ESTIMATOR, **(given or {})})


__all__ = ["DEFAULT_K_SWEEP", "FidelityOptions", "gathered", "option_names"]
