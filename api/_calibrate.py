"""``calibrate``: OM's operator rates measured on Spark, or the engine model's constants
fitted to runs' plan times, written as a copy of the catalog; what ``cqopt calibrate``
does."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cqopt.api._common import Name, PathLike, as_catalog
from cqopt.catalog import Catalog
from cqopt.charts.settings import setting_label
from cqopt.errors import CqoptError
from cqopt.location import local_output
from cqopt.progress import say as step

if TYPE_CHECKING:
    from cqopt.spark.calibrate import Calibration
    from cqopt.spark.engine_fit import EngineFit

# Bounds a calibration fits in: Spark's DataFrame.range and a 2-core machine's patience.
MAX_ROWS = 2**31 - 1  # rows of the largest size
MAX_SIZES = 20  # sizes halve: the 20th of 2^31 rows is 2,048
MAX_REPEATS = 100


@dataclass(frozen=True)
class Calibrated:
    """What :func:`calibrate` wrote to ``out``: the catalog it started from and either the
    rates ``measured`` on Spark or the engine constants ``fitted`` to runs."""

    catalog: Catalog
    out: Path
    measured: Calibration | None = None
    fitted: EngineFit | None = None

    def text(self) -> str:
        """The measured rates (or fitted constants) beside the catalog's, as the console
        prints them."""
        if self.fitted is not None:
            fit = self.fitted
            lines = [*fit.summary_lines(), f"{'constant':<12} {'was':>10} {'fitted':>10}  "
                                           "(seconds)"]
            for name in type(fit.constants).__dataclass_fields__:
                lines.append(f"{name:<12} {getattr(self.catalog.engine, name):10.3g} "
                             f"{getattr(fit.constants, name):10.3g}")
            return "\n".join(lines)
        result = self.measured
        lines = [f"Measured on {result.where}, {result.when}",
                 f"{'kind':<20} {'catalog rate':>13} {'measured rate':>14} {'fixed s':>8} "
                 f"{'fixed share':>11} {'held-out error':>14}"]
        for kind, fit in result.fits.items():
            lines.append(f"{kind:<20} {getattr(self.catalog.operators, kind):13,.0f} "
                         f"{fit.rate:14,.0f} {fit.fixed:8.3f} {fit.fixed_share:11.0%} "
                         f"{fit.held_out_error:14.1%}")
            lines.append("    " + ", ".join(f"{rows:,} tuples {seconds:.3f} s"
                                            for rows, seconds in zip(fit.rows, fit.seconds)))
        return "\n".join(lines)

    __str__ = text


def calibrate(catalog: PathLike | Catalog, out: PathLike, *,
              from_runs: Sequence[PathLike] | None = None, smoothing: float | None = None,
              master: str = "local[*]", rows: int = 16_000_000, sizes: int = 4,
              repeats: int = 3, driver_memory: str | None = "6g",
              progress: bool | Callable[[str], None] = True,
              name: Name = setting_label) -> Calibrated:
    """Measure the operators' processing rates on Spark (or fit the engine model's
    constants to runs' plan times) and write a copy of the catalog with them.

    Selection-equality, selection-range, projection, equi-join and aggregate
    are timed over generated data of the catalog's column types at ``sizes``
    sizes (the largest ``rows``, each next half of it), and tuples/s fitted per
    kind by least squares, the intercept being Spark's per-job fixed cost.
    An existing ``out`` is replaced only if cqopt wrote it and nobody edited it
    since, and never when it is the catalog read.

    Parameters
    ----------
    catalog : path or Catalog
        The stream catalog to calibrate.
    out : path
        The catalog (TOML) to write.
    from_runs : sequence of path, optional
        Run folders of ``cqopt run`` (``--shadow`` times every plan): fit the
        engine model's ``[engine]`` constants to their plan times, without Spark,
        instead of timing operators.
    smoothing : float, optional
        With ``from_runs`` only: the new fit's weight against constants the catalog
        already has from an earlier fit, in (0, 1]; default 0.5.
    master : str
        A running Spark session of this process, else a new one on this master URL.
    rows, sizes, repeats : int
        Rows of the largest size; how many sizes (3 or more: each is left out once
        to judge the fit on); runs per size, the median counting.
    driver_memory : str, optional
        Memory of a new Spark driver (``6g``): the data is cached twice per size.
    progress : bool or callable
        Each step on stderr (default), or to this callable; False says nothing.
    name : callable
        ``name(parameter, value)`` names a parameter in messages.

    Returns
    -------
    Calibrated
        The catalog calibrated, ``out``, and what was measured or fitted
        (``text()`` as ``cqopt calibrate`` prints it).

    Raises
    ------
    CqoptError
        A bad catalog, ``out`` or setting before Spark starts; a failed Spark job or
        timings that cannot be fitted.
    """
    from cqopt.spark.calibrate import check_out

    out = local_output(out, "catalog", name("out", out))
    check_out(out, catalog.source if isinstance(catalog, Catalog) else catalog)
    if smoothing is not None and not from_runs:  # it weighs a fit from runs: nothing else
        raise CqoptError(f"{name('smoothing', smoothing)} weighs a fit from run folders, and "
                         f"none is given: give {name('from_runs', 'DIR')} too, "
                         "or leave it out")
    smoothing = 0.5 if smoothing is None else smoothing
    _judge_sizes(rows, sizes, repeats, smoothing, name)
    catalog = as_catalog(catalog)
    if from_runs:
        return _fitted(catalog, out, from_runs, smoothing)
    say = progress if callable(progress) else (lambda line: step(line, enabled=progress))
    return _measured(catalog, out, master, rows, sizes, repeats, driver_memory, say)


def _judge_sizes(rows: int, sizes: int, repeats: int, smoothing: float, name: Name) -> None:
    """Refuse a count or share out of its bounds, before Spark starts."""
    for key, value, low, high in (("rows", rows, 1000, MAX_ROWS), ("sizes", sizes, 3, MAX_SIZES),
                                  ("repeats", repeats, 1, MAX_REPEATS)):
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise CqoptError(f"{name(key, value)}: needs a whole number from {low:,} to "
                             f"{high:,}")
    if isinstance(smoothing, bool) or not isinstance(smoothing, (int, float)) \
            or not 0 < smoothing <= 1:
        raise CqoptError(f"{name('smoothing', smoothing)}: needs a share in (0, 1]")


def _measured(catalog: Catalog, out: Path, master: str, rows: int, sizes: int, repeats: int,
              driver_memory: str | None, say: Callable[[str], Any]) -> Calibrated:
    """The operators timed on Spark and their rates written to ``out``."""
    from cqopt.spark.calibrate import calibrate as measure
    from cqopt.spark.calibrate import write_catalog
    from cqopt.spark.session import running_session

    say(f"starting Spark ({master})")
    conf = {"spark.driver.memory": driver_memory} if driver_memory else None
    with running_session(master, progress=False, conf=conf) as spark:
        result = measure(spark, catalog, max_rows=rows, sizes=sizes, repeats=repeats,
                         progress=say)
    write_catalog(catalog, result, out)
    return Calibrated(catalog, out, measured=result)


def _fitted(catalog: Catalog, out: Path, runs: Sequence[PathLike], smoothing: float
            ) -> Calibrated:
    """The engine model's constants fitted to runs' plan times and written to ``out``; no
    Spark."""
    from cqopt.spark.engine_fit import fit_runs, write_fitted_catalog

    fit = fit_runs(list(runs), catalog, alpha=smoothing)
    write_fitted_catalog(catalog, fit, out, ", ".join(map(str, runs)))
    return Calibrated(catalog, out, fitted=fit)
