"""Chart settings, judged in one place: k, axes, ranges, fixed values, model, weights, ...

Settings reach a chart from the workload TOML, the command line or Python.
Each origin hands its values to :func:`judge_settings`, which checks and
normalises every one by the same rule and names the origin in its message
(``w.toml: defaults.k: ...``, ``--k 0: ...``); :class:`ChartSettings` is the
typed result, and its constructor runs the same judge, so settings made in
Python are held to the same rules. Each value is judged once, at the edge where
it enters: :func:`judge_settings` returns a :class:`JudgedSettings`, which is
carried from there (into a workload, a build's overrides, the settings of each
query) and never judged again. ``k`` and a chart's cell count are
bounded by this machine's memory (:func:`check_cells`), so a chart too large
to hold is refused before anything is allocated.

>>> ChartSettings(k=4, weights=[1, 0]).weights
(1.0, 0.0)
>>> ChartSettings(k=0)
Traceback (most recent call last):
...
cqopt.charts.settings.SettingsError: k = 0: must be a whole number >= 1
>>> judge_settings({"model": "oms"}, lambda key, value: f"--{key} {value}")
Traceback (most recent call last):
...
cqopt.charts.settings.SettingsError: --model oms: unknown cost model 'oms'; did you mean 'om'? (the registered models are om, pipes, ...)
"""

from __future__ import annotations

import math
import numbers
import os
from collections.abc import Callable, Mapping
from dataclasses import MISSING, dataclass, field, fields, replace
from typing import Any

from cqopt.costmodel import CostModelError, Utility, model_entry
from cqopt.costmodel.registry import memory_units
from cqopt.costmodel.utility import DEFAULT_WEIGHTS
from cqopt.errors import CqoptError, did_you_mean

DEFAULT_K = 10
# A local build holds each cell's plan index (uint16) and winning utility (float64).
BYTES_PER_CELL = 10


class SettingsError(CqoptError, ValueError):
    """A chart setting is not one cqopt can build with."""


class _Problem(Exception):
    """What is wrong with one value; ``path`` extends the key (``ranges.rate.S``)."""

    def __init__(self, problem: str, path: str = ""):
        super().__init__(problem)
        self.path = path


def memory_bytes() -> int:
    """This machine's physical memory in bytes (what any chart must fit in)."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):  # pragma: no cover - not POSIX
        return 1 << 34


def max_cells() -> int:
    """The most cells a chart may have here: what physical memory holds at
    :data:`BYTES_PER_CELL` bytes a cell."""
    return memory_bytes() // BYTES_PER_CELL


def _memory_text() -> str:
    return (f"the {max_cells():.3g} cells of {BYTES_PER_CELL} bytes that this machine's "
            f"{memory_bytes() / (1 << 30):.1f} GiB of memory hold")


def _whole(value: Any, low: int) -> int:
    if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value < low:
        raise _Problem(f"must be a whole number >= {low}")
    return int(value)


def _number(value: Any) -> float:
    if not isinstance(value, numbers.Real) or isinstance(value, bool) \
            or not math.isfinite(value):
        raise _Problem("must be a finite number")
    return float(value)


def _k(value: Any) -> int:
    k = _whole(value, 1)
    if k > max_cells():
        raise _Problem(f"more regions per axis than {_memory_text()}; use a smaller k, or "
                       "--refine BUDGET")
    return k


def _weights(value: Any) -> tuple[float, ...]:
    if isinstance(value, (str, bytes)) or not hasattr(value, "__len__") \
            or len(value) not in (2, 3):
        raise _Problem("must be [w_r, w_m] or [w_r, w_m, w_c], non-negative with at least "
                       "one weight > 0")
    try:
        weights = tuple(_number(w) for w in value)
        Utility(*weights)  # the utility's own rule for its weights
    except (_Problem, CostModelError):
        raise _Problem("must be [w_r, w_m] or [w_r, w_m, w_c], non-negative with at least "
                       "one weight > 0") from None
    return weights


def _model(value: Any) -> str:
    try:
        return model_entry(value).name
    except CostModelError as err:
        raise _Problem(str(err)) from None


def _memory_unit(value: Any) -> str:
    if value not in memory_units():
        raise _Problem(f"unknown memory unit{did_you_mean(str(value), memory_units())} "
                       f"(expected {' or '.join(memory_units())})")
    return value


def _axes(value: Any) -> tuple[str, ...] | None:
    if value is None:
        return None
    if isinstance(value, str) or not isinstance(value, (list, tuple)) or not value \
            or not all(isinstance(a, str) for a in value):
        raise _Problem("must be a list of statistic names")
    return tuple(value)


def _ranges(value: Any) -> dict[str, tuple[float, float]]:
    if not isinstance(value, Mapping):
        raise _Problem("must be a table of statistic = [lo, hi]")
    out = {}
    for stat, rng in value.items():
        try:
            if isinstance(rng, (str, bytes)) or len(rng) != 2:
                raise _Problem("")
            lo, hi = (_number(x) for x in rng)
            if not 0 <= lo < hi:
                raise _Problem("")
        except (_Problem, TypeError):
            raise _Problem(f"must be [lo, hi] with 0 <= lo < hi, got {rng!r}", f".{stat}") \
                from None
        out[str(stat)] = (lo, hi)
    return out


def _fixed(value: Any) -> dict[str, float]:
    if not isinstance(value, Mapping):
        raise _Problem("must be a table of statistic = value")
    out = {}
    for stat, v in value.items():
        try:
            out[str(stat)] = _number(v)
            if out[str(stat)] < 0:
                raise _Problem("")
        except _Problem:
            raise _Problem(f"must be a non-negative number, got {v!r}", f".{stat}") from None
    return out


def _refine(value: Any) -> int | None:
    if value is None:
        return None
    budget = _whole(value, 1)
    if budget > max_cells():
        raise _Problem(f"a larger budget than {_memory_text()}")
    return budget


def _depth(value: Any) -> int | None:
    return None if value is None else _whole(value, 0)


def _reduce(value: Any) -> float | None:
    if value is None:
        return None
    try:
        lam = _number(value)
    except _Problem:
        lam = math.nan
    if not 0 <= lam < 1:
        raise _Problem("the cost-increase threshold must lie in [0, 1), e.g. 0.1 for at most "
                       "10% above the optimum")
    return lam


# Each setting's one rule: value -> normalised value, or a _Problem.
JUDGES: dict[str, Callable[[Any], Any]] = {
    "k": _k, "weights": _weights, "model": _model, "memory_unit": _memory_unit,
    "axes": _axes, "ranges": _ranges, "fixed": _fixed,
    "refine": _refine, "depth": _depth, "reduce": _reduce,
}


class JudgedSettings(dict):
    """Settings :func:`judge_settings` judged, carried from the edge where they were given
    (a workload's table, the command line, a call).

    :func:`judge_settings` returns one given one, and :meth:`ChartSettings.from_values`
    takes one's values as they are: a value is judged once, however far it travels.

    >>> judged = judge_settings({"k": 4})
    >>> judge_settings(judged) is judged
    True
    """


def setting_label(path: str, value: Any = None) -> str:
    """How a message names a setting: ``k = 0``, or just its path (``ranges.rate.S``)."""
    return path if value is None else f"{path} = {value!r}"


def judge_settings(values: Mapping[str, Any],
                   where: Callable[[str, Any], str] = setting_label,
                   error: type[CqoptError] = SettingsError) -> dict[str, Any]:
    """Every setting in ``values`` checked and normalised: the one judge of chart settings.

    Parameters
    ----------
    values : mapping of str to object
        Some of :data:`JUDGES`' keys (a workload's table, the command line's
        options, keyword arguments); ``None`` values are left out.
    where : callable, optional
        ``where(path, value)`` names a setting in a message: ``"w.toml:
        defaults.k = 0"``, ``"--k 0"``; ``value`` is None for a part of a
        setting (``ranges.rate.S``), whose problem names its value. Default:
        :func:`setting_label`, ``"k = 0"``.
    error : type
        The error to raise (a workload raises its ``WorkloadError``).

    Returns
    -------
    JudgedSettings
        The given settings, normalised (tuples, floats, registered names);
        ``values`` itself if it was judged already.

    Raises
    ------
    CqoptError
        Of type ``error``: an unknown key, or a value its rule refuses.

    Examples
    --------
    >>> judge_settings({"k": 4, "ranges": {"rate.S": [1, 10]}, "reduce": None})
    {'k': 4, 'ranges': {'rate.S': (1.0, 10.0)}}
    >>> judge_settings({"kk": 4})
    Traceback (most recent call last):
    ...
    cqopt.charts.settings.SettingsError: kk = 4: unknown setting; did you mean 'k'? (expected one of k, weights, model, memory_unit, axes, ranges, fixed, refine, depth, reduce)
    """
    if isinstance(values, JudgedSettings):
        return values
    out = JudgedSettings()
    for key, value in values.items():
        if value is None:
            continue
        judge = JUDGES.get(key)
        try:
            if judge is None:
                raise _Problem(f"unknown setting{did_you_mean(key, JUDGES)} (expected one of "
                               f"{', '.join(JUDGES)})")
            out[key] = judge(value)
        except _Problem as problem:
            label = where(key + problem.path, None if problem.path else value)
            raise error(f"{label}: {problem}") from None
    return out


def check_together(values: Mapping[str, Any], where: Callable[[str, Any], str] = setting_label,
                   error: type[CqoptError] = SettingsError) -> None:
    """The rules between settings: a memory unit the model counts in, a depth only with
    a refinement budget. ``where`` and ``error`` as :func:`judge_settings` takes them.

    >>> check_together({"model": "pipes", "memory_unit": "tuples"})
    Traceback (most recent call last):
    ...
    cqopt.charts.settings.SettingsError: memory_unit = 'tuples': the PIPES model counts memory in bytes only, not 'tuples'; change memory_unit or model
    """
    model, unit = values.get("model") or "om", values.get("memory_unit") or "bytes"
    try:
        model_entry(model).check_memory_unit(unit)
    except CostModelError as err:
        raise error(f"{where('memory_unit', unit)}: {err}; change memory_unit or "
                    "model") from None
    if values.get("weights") is not None:
        try:
            model_entry(model).check_weights(values["weights"])
        except CostModelError as err:
            raise error(f"{where('weights', values['weights'])}: {err}") from None
    if values.get("depth") is not None and values.get("refine") is None:
        raise error(f"{where('depth', values['depth'])}: only a refined chart has a depth; "
                    f"add {where('refine', None).split(' ')[0]} BUDGET")


def judge_options(values: Mapping[str, Any], where: Callable[[str, Any], str] = setting_label,
                  error: type[CqoptError] = SettingsError) -> dict[str, Any]:
    """Some settings given together (a command line's, a call's): each judged by
    :func:`judge_settings`, then together by :func:`check_together`, named by ``where``.

    >>> judge_options({"depth": 2, "k": 4})
    Traceback (most recent call last):
    ...
    cqopt.charts.settings.SettingsError: depth = 2: only a refined chart has a depth; add refine BUDGET
    """
    options = judge_settings(values, where, error)
    check_together(options, lambda path, value: where(path, values.get(path)), error)
    return options


@dataclass(frozen=True)
class ChartSettings:
    """What a chart is built with, judged by :func:`judge_settings` on construction.

    Attributes
    ----------
    k : int
        Regions per axis of a grid chart.
    weights : tuple of float
        The utility's ``(w_r, w_m[, w_c])``.
    model : str
        A registered cost model.
    memory_unit : str
        One of the model's memory units.
    axes : tuple of str, optional
        The chart's axes (default: the query's, see :func:`cqopt.charts.spec.default_axes`).
    ranges : dict
        Statistic to ``(lo, hi)`` of an axis.
    fixed : dict
        Statistic to its value where it is not an axis.
    refine, depth : int, optional
        A refined chart of at most ``refine`` regions, to ``depth`` splits.
    reduce : float, optional
        Anorexic reduction's cost-increase threshold λ in [0, 1).
    """

    k: int = DEFAULT_K
    weights: tuple[float, ...] = DEFAULT_WEIGHTS
    model: str = "om"
    memory_unit: str = "bytes"
    axes: tuple[str, ...] | None = None
    ranges: Mapping[str, tuple[float, float]] = field(default_factory=dict)
    fixed: Mapping[str, float] = field(default_factory=dict)
    refine: int | None = None
    depth: int | None = None
    reduce: float | None = None

    def __post_init__(self) -> None:
        given = {f.name: getattr(self, f.name) for f in fields(self)}
        for key, value in judge_settings(given).items():
            object.__setattr__(self, key, value)
        check_together(given)

    @classmethod
    def from_values(cls, values: Mapping[str, Any]) -> ChartSettings:
        """Settings from values (a workload's, merged), defaults for the rest.

        The values of a :class:`JudgedSettings` are taken as they are (judged where
        they were given); any other mapping's are judged here. Either way the
        settings are checked together (:func:`check_together`).
        """
        given = {k: v for k, v in values.items() if v is not None}
        if not isinstance(values, JudgedSettings):
            return cls(**given)
        unknown = set(given) - {f.name for f in fields(cls)}
        if unknown:
            raise TypeError(f"ChartSettings has no setting {', '.join(sorted(unknown))}")
        settings = object.__new__(cls)
        for f in fields(cls):
            value = given[f.name] if f.name in given else (
                f.default_factory() if f.default is MISSING else f.default)
            object.__setattr__(settings, f.name, value)
        check_together({f.name: getattr(settings, f.name) for f in fields(cls)})
        return settings

    def replace(self, **changes: Any) -> ChartSettings:
        """These settings with ``changes`` (``None`` leaves a setting as it is), judged again."""
        return replace(self, **{k: v for k, v in changes.items() if v is not None})


def check_cells(name: str, k: int | tuple[int, ...], n_axes: int | None = None,
                label: str = "k") -> int:
    """The number of cells of a chart, refused before any allocation when memory cannot
    hold it.

    Parameters
    ----------
    name : str
        The query, for the message.
    k : int or tuple of int
        Regions per axis: one k for ``n_axes`` axes, or each axis' own.
    n_axes : int, optional
        With one ``k``: the number of axes.
    label : str
        How the message names k (``"k"``, ``"--k"``).

    Returns
    -------
    int

    Raises
    ------
    SettingsError
        More cells than :func:`max_cells`.

    Examples
    --------
    >>> check_cells("Q1", 10, 2)
    100
    >>> check_cells("Q1", 10**9, 2)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    cqopt.charts.settings.SettingsError: query Q1: k = 1000000000 on 2 axes makes 1e+18 cells, ...
    """
    shape = (k,) * n_axes if isinstance(k, numbers.Integral) else tuple(k)
    cells = math.prod(int(x) for x in shape)
    if cells > max_cells():
        given = f"{label} {shape[0]}" if label.startswith("--") else f"{label} = {shape[0]}"
        per_axis = (f"{given} on {len(shape)} axes" if len(set(shape)) == 1
                    else f"a grid of {' x '.join(map(str, shape))}")
        raise SettingsError(f"query {name}: {per_axis} makes {cells:.3g} cells, more than "
                            f"{_memory_text()}; use a smaller k, or --refine BUDGET")
    return cells
