"""The cost-model seam: what a model provides, and the registry of models by name.

A cost model is anything that satisfies :class:`CostModel`: it costs a plan
over a broadcast grid of statistics (``cost``) and at one point
(``point_cost``), says which statistics a plan makes it read
(``statistics``) and which constants it costs with and where each came from
(``constants``). Mixing in :class:`~cqopt.costmodel.base.PointCosting` and
writing ``_cost(plan, stats, xp)`` once gives the first two and the third.

Every place that names a model (the workload file, ``--model``, the chart
settings, a chart set's manifest, the model validation) reads
:data:`MODELS` through :func:`model_entry`: a model is added by one module
and one :func:`register_model` call, nowhere else.

>>> model_names()[:2]
('om', 'pipes')
>>> model_entry("oms")
Traceback (most recent call last):
...
cqopt.costmodel.base.CostModelError: unknown cost model 'oms'; did you mean 'om'? (the registered models are om, pipes, ...)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from numpy.typing import ArrayLike

from cqopt.costmodel.base import Constant, CostModelError, PlanCost
from cqopt.errors import did_you_mean


@runtime_checkable
class CostModel(Protocol):
    """What a cost model must provide to cost charts, replays and ``explain``.

    Attributes
    ----------
    name : str
        The name it is registered under (``"om"``).
    memory_unit : str
        What its memory figures count (``"bytes"`` or ``"tuples"``).
    """

    name: str
    memory_unit: str

    def cost(self, plan, stats: Mapping[str, ArrayLike]) -> PlanCost:
        """Rate, memory and CPU of ``plan`` over the broadcast grid of ``stats``."""

    def point_cost(self, plan, stats: Mapping[str, float]) -> tuple:
        """``(rate, memory, cpu, operators)`` of ``plan`` at one point, as floats."""

    def statistics(self, plan) -> tuple[str, ...]:
        """The statistics ``cost`` reads for ``plan`` (``rate.S``, ``sel.S``, ...)."""

    def constants(self) -> dict[str, Constant]:
        """Every constant the model costs with, by name, with its source."""


ModelFactory = Callable[..., CostModel]  # (catalog, memory_unit=...) -> CostModel


@dataclass(frozen=True)
class ModelEntry:
    """A registered model: how to make it and which memory units it counts in."""

    name: str
    factory: ModelFactory
    memory_units: tuple[str, ...] = ("bytes",)
    summary: str = ""
    weights: tuple[float, ...] | None = None  # a model whose cost is one of the three terms
    unit: str | None = None  # what its own terms count, e.g. "predicted seconds (engine model)"
    defaults: str = "its default constants"  # how a verdict names its default constants

    def verdict_unit(self, weights: tuple[float, ...] | None = None) -> str:
        """The unit a verdict on this model's cost is in, for a chart of ``weights``.

        A model with its own unit (the engine's predicted seconds) is in it when the
        weights weigh only its own terms; any other weighing is the model's utility.

        >>> ModelEntry("om", object).verdict_unit((0.4, 0.6))
        "the OM model's utility"
        >>> seconds = ModelEntry("engine", object, weights=(0, 0, 1), unit="predicted seconds")
        >>> seconds.verdict_unit((0, 0, 1)), seconds.verdict_unit((0.4, 0.6, 1))
        ('predicted seconds', "the ENGINE model's utility")
        """
        utility = f"the {self.name.upper()} model's utility"
        if self.unit is None:
            return utility
        if weights is not None and self.weights is not None:
            padded = tuple(weights) + (0.0,) * (3 - len(weights))
            if any(w > 0 and own == 0 for w, own in zip(padded, self.weights)):
                return utility
        return self.unit

    def check_weights(self, weights: tuple[float, ...]) -> tuple[float, ...]:
        """``weights`` if they weigh every term this model's cost is in, else a CostModelError.

        >>> ModelEntry("engine", object, weights=(0, 0, 1)).check_weights((0.4, 0.6))
        Traceback (most recent call last):
        ...
        cqopt.costmodel.base.CostModelError: the ENGINE model's cost is its CPU term, which weights (0.4, 0.6) leave out; weigh it alone, e.g. weights = [0, 0, 1] (--weights 0,0,1)
        """
        if self.weights is None:
            return weights
        padded = tuple(weights) + (0.0,) * (3 - len(weights))
        if not any(w > 0 and padded[i] > 0 for i, w in enumerate(self.weights)):
            terms = [t for t, w in zip(("rate", "memory", "CPU"), self.weights) if w > 0]
            example = ", ".join(f"{w:g}" for w in self.weights)
            raise CostModelError(
                f"the {self.name.upper()} model's cost is its {' and '.join(terms)} term, "
                f"which weights {tuple(weights)} leave out; weigh it alone, e.g. weights = "
                f"[{example}] (--weights {example.replace(' ', '')})")
        return weights

    def check_memory_unit(self, memory_unit: str) -> str:
        """``memory_unit`` if this model counts memory in it, else a CostModelError."""
        if memory_unit not in self.memory_units:
            raise CostModelError(
                f"the {self.name.upper()} model counts memory in "
                f"{' or '.join(self.memory_units)} only, not {memory_unit!r}")
        return memory_unit


MODELS: dict[str, ModelEntry] = {}


def register_model(factory: ModelFactory, *, name: str | None = None,
                   memory_units: tuple[str, ...] | None = None, summary: str | None = None,
                   unit: str | None = None, defaults: str | None = None,
                   replace: bool = False) -> ModelEntry:
    """Register a cost model under its name: the one line that adds a model.

    Parameters
    ----------
    factory : callable
        ``factory(catalog, memory_unit=...)`` makes the model; usually the
        model's class.
    name : str, optional
        Default: ``factory.name``.
    memory_units : tuple of str, optional
        The memory units it counts in. Default: ``factory.memory_units``, else
        ``("bytes",)``.
    summary : str, optional
        One line for ``--help``. Default: the first line of the factory's docstring.
    unit : str, optional
        What the model's own cost counts, as verdicts name it (``"predicted seconds
        (engine model)"``). Default: ``factory.unit``, else none: verdicts are in
        "the NAME model's utility".
    defaults : str, optional
        How a verdict names the model's default constants (``"the paper's operator
        rates"``). Default: ``factory.defaults``, else ``"its default constants"``.
    replace : bool
        Replace a model registered under the same name.

    Returns
    -------
    ModelEntry

    Raises
    ------
    CostModelError
        The name is taken (and ``replace`` is false) or is not a plain name.

    Examples
    --------
    >>> from cqopt.costmodel.om import OM
    >>> register_model(OM, name="om-copy").memory_units
    ('bytes', 'tuples')
    >>> unregister_model("om-copy")
    """
    name = name if name is not None else getattr(factory, "name", None)
    if not isinstance(name, str) or not name.replace("-", "").replace("_", "").isalnum():
        raise CostModelError(f"a cost model needs a plain name (letters, digits, - or _), "
                             f"got {name!r}")
    if name in MODELS and not replace:
        raise CostModelError(f"a cost model named {name!r} is registered already; pass "
                             "replace=True to replace it")
    units = memory_units if memory_units is not None else getattr(factory, "memory_units",
                                                                  ("bytes",))
    if summary is None:
        summary = ((getattr(factory, "__doc__", None) or "").strip().splitlines() or [""])[0]
    weights = getattr(factory, "weights", None)
    entry = ModelEntry(name, factory, tuple(units), summary,
                       None if weights is None else tuple(float(w) for w in weights),
                       unit if unit is not None else getattr(factory, "unit", None),
                       defaults if defaults is not None else getattr(
                           factory, "defaults", "its default constants"))
    MODELS[name] = entry
    return entry


def unregister_model(name: str) -> None:
    """Forget the model registered as ``name`` (a test's toy model, say)."""
    model_entry(name)
    del MODELS[name]


def model_names() -> tuple[str, ...]:
    """The registered models' names, in registration order."""
    return tuple(MODELS)


def memory_units() -> tuple[str, ...]:
    """Every memory unit some registered model counts in."""
    return tuple(dict.fromkeys(u for entry in MODELS.values() for u in entry.memory_units))


def model_entry(name: Any) -> ModelEntry:
    """The registered model called ``name``.

    Raises
    ------
    CostModelError
        No model of that name; the message lists the registered ones.
    """
    try:
        return MODELS[name]
    except (KeyError, TypeError):
        raise CostModelError(f"unknown cost model {name!r}{did_you_mean(str(name), MODELS)} "
                             f"(the registered models are {', '.join(MODELS)})") from None


def make_model(name: str, catalog, memory_unit: str = "bytes") -> CostModel:
    """The cost model called ``name`` over ``catalog``.

    Parameters
    ----------
    name : str
        A registered model (:func:`model_names`): ``"om"``, ``"pipes"``, ...
    catalog : Catalog
        Widths, rates and constants the model costs with.
    memory_unit : str
        What memory is counted in; one of the model's ``memory_units``.

    Returns
    -------
    CostModel

    Raises
    ------
    CostModelError
        An unknown model, or a memory unit the model does not count in.

    Examples
    --------
    >>> from cqopt.catalog import Catalog
    >>> cat = Catalog.from_dict({"streams": {"S": {"rate": [1, 2],
    ...     "columns": {"a": "int"}}}})
    >>> make_model("om", cat).name
    'om'
    """
    entry = model_entry(name)
    entry.check_memory_unit(memory_unit)
    return entry.factory(catalog, memory_unit=memory_unit)
