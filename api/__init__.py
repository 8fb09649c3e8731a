"""cqopt's pipelines as Python functions: what the ``cqopt`` commands run, without a shell.

:func:`build` builds a workload's plan charts (in this process or on Spark)
and writes them as a chart set; :func:`generate` writes seeded stream traces;
:func:`fidelity` replays traces through charts into a report (its settings a
:class:`FidelityOptions`); :func:`run` runs one query adaptively on Spark
Structured Streaming, :func:`run_workload` a workload's queries together.
:func:`explain` costs a query's candidate plans, :func:`choose` looks a plan
up in a chart set, :func:`show` draws a query's plan diagram and
:func:`calibrate` measures the operators' rates (or fits the engine model to
runs). The command line parses its options, calls these and prints what they
return; each checks everything it is given before any work, and raises a
:class:`~cqopt.errors.CqoptError` that says what was wrong. ``cqopt.build``,
``cqopt.generate``, ``cqopt.fidelity`` and ``cqopt.run`` are these functions.

A message names a parameter as Python spells it (``k = 0``); the command
line passes ``name=`` so that its messages name the option (``--k 0``).

Each pipeline is a module of its own (``_build``, ``_generate``,
``_fidelity``, ``_run``, ``_explain``, ``_choose``, ``_show``,
``_calibrate``); this package is their one face, and ``cqopt.api.X`` the
name to use.
"""

from __future__ import annotations

from cqopt.api._build import build
from cqopt.api._calibrate import MAX_REPEATS, MAX_ROWS, MAX_SIZES, Calibrated, calibrate
from cqopt.api._choose import Chosen, choose
from cqopt.api._explain import Explanation, ExplainedQuery, explain
from cqopt.api._fidelity import fidelity
from cqopt.api._fidelity_options import FidelityOptions
from cqopt.api._generate import generate
from cqopt.api._run import run, run_workload
from cqopt.api._show import Shown, plans_text, show
from cqopt.api._traces import check_span, trace_paths

__all__ = ["MAX_REPEATS", "MAX_ROWS", "MAX_SIZES", "Calibrated", "Chosen", "ExplainedQuery",
           "Explanation", "FidelityOptions", "Shown", "build", "calibrate", "check_span",
           "choose", "explain", "fidelity", "generate", "plans_text", "run", "run_workload",
           "show", "trace_paths"]
