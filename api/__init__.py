"""cqopt's pipelines as Python functions: what the ``cqopt`` commands run, without a shell.

:func:`build` builds a workload's plan charts (in this process or on Spark)
and writes them as a chart set; :func:`generate` writes seeded stream traces;
:func:`fidelity` replays traces through charts into a report; :func:`run` runs
one query adaptively on Spark Structured Streaming. The command
line parses its options and calls these; each checks everything it is given
before any work, and raises a :class:`~cqopt.errors.CqoptError` that says
what was wrong. ``cqopt.build``, ``cqopt.generate``, ``cqopt.fidelity`` and
``cqopt.run`` are these functions.

A message names a parameter as Python spells it (``k = 0``); the command
line passes ``name=`` so that its messages name the option (``--k 0``).

Each pipeline is a module of its own (``_build``, ``_generate``,
``_fidelity``, ``_run``, ...); this package is their one face, and
``cqopt.api.X`` is the name to use.
"""

from __future__ import annotations

from cqopt.api._build import build
from cqopt.api._fidelity import fidelity
from cqopt.api._fidelity_options import FidelityOptions
from cqopt.api._generate import generate
from cqopt.api._run import run, run_workload
from cqopt.api._traces import check_span, trace_paths

__all__ = ["FidelityOptions", "build", "check_span", "fidelity", "generate", "run",
           "run_workload", "trace_paths"]
