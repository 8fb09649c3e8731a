"""The run-time policy options ``cqopt fidelity`` and ``cqopt run`` share.

The estimator (``--estimator``, ``--d``, ``--decay``), the choice
(``--choice``, ``--residuals``), what a round off the chart runs
(``--off-chart``), the regret-aware fallback (``--fallback``)
and the hysteresis (``--hysteresis`` with ``--margin``/``--hold-rounds`` or
``--horizon``): added to a parser in one place, checked in one place, and
turned into :class:`~cqopt.runtime.adaptive.AdaptiveQuery`'s keyword
arguments in one place.
"""

from __future__ import annotations

import argparse
from typing import Any

from cqopt.cli.options import number
from cqopt.errors import CqoptError
from cqopt.runtime.estimators import DEFAULT_ESTIMATOR, ESTIMATORS


# The most rounds an estimator, the residuals or the fallback look back: each keeps
# that many values per statistic or plan, and a step reads them.
MAX_WINDOW = 100_000


def add_policy_arguments(p: argparse.ArgumentParser,
                         estimator: str = DEFAULT_ESTIMATOR) -> None:
    """Add the estimator, choice, fallback and hysteresis options to ``p``; ``estimator``
    is the command's default (:data:`cqopt.runtime.estimators.DEFAULT_ESTIMATOR`)."""
    p.add_argument("--d", type=number(integer=True, low=1, high=MAX_WINDOW), default=5,
                   help="rounds the estimator looks back (5)")
    p.add_argument("--decay", type=number(low=0), default=0.5,
                   help="OM's decay a (default 0.5)")
    default = ("the round's own statistics, measured (sampled, in a replay) before it runs"
               if estimator == "sample" else "OM's decay mean")
    p.add_argument("--estimator", type=_estimator, default=estimator,
                   metavar="{" + ",".join(ESTIMATORS) + ",sample[:RATIO]}",
                   help=f"rate and selectivity estimator (default: {default}); "
                        "sample[:RATIO] decides each round on its own statistics, counted "
                        "exactly and, in a replay, sampled from RATIO of its tuples (default "
                        "0.1); cqopt run measures them on all of the round's tuples")
    p.add_argument("--choice", choices=["point", "expected"], default="point",
                   help="run the chart's plan at the point estimate (OM), or the plan of "
                        "lowest expected cost over recent estimation errors")
    p.add_argument("--off-chart", choices=["cost", "chart"], default="cost",
                   help="a round whose statistics the chart does not cover (an axis out of "
                        "its range, a fixed statistic more than 2x off): cost every plan at "
                        "them and run the cheapest (default), or run the chart's plan anyway")
    p.add_argument("--residuals", type=number(integer=True, low=1, high=MAX_WINDOW), default=20,
                   metavar="N",
                   help="rounds of estimation errors --choice expected keeps (20)")
    p.add_argument("--fallback", type=number(integer=True, low=1, high=MAX_WINDOW),
                   metavar="ROUNDS",
                   help="run the best fixed plan of the last ROUNDS while it beats the chart")
    p.add_argument("--hysteresis", choices=["none", "margin", "priced"], default="none",
                   help="hold the current plan: until another wins by --margin for "
                        "--hold-rounds rounds, or until the saving over --horizon rounds pays "
                        "for handing over the new plan's join state (default none)")
    p.add_argument("--margin", type=number(low=0), default=0.05,
                   help="hysteresis margin (0.05)")
    p.add_argument("--hold-rounds", type=number(integer=True, low=1), default=3,
                   help="hysteresis rounds (3)")
    p.add_argument("--horizon", type=number(low=0), default=100.0,
                   help="rounds a priced switch must pay back in (100)")


def _estimator(text: str) -> str:
    """An estimator's name, or ``sample[:RATIO]`` with its ratio checked."""
    if text.startswith("sample"):
        from cqopt.replay.sampling import parse_sample_ratio

        try:
            parse_sample_ratio(text)
        except CqoptError as err:
            raise argparse.ArgumentTypeError(str(err)) from None
        return text
    if text not in ESTIMATORS:
        raise argparse.ArgumentTypeError(f"{text!r}: expected one of "
                                         f"{', '.join(ESTIMATORS)} or sample[:RATIO]")
    return text


def check_policy_options(args: argparse.Namespace) -> None:
    """Refuse an option out of its range, before any work starts."""
    for option, value, low in (("--d", args.d, 1), ("--decay", args.decay, 0),
                               ("--residuals", args.residuals, 1),
                               ("--fallback", args.fallback, 1), ("--margin", args.margin, 0),
                               ("--hold-rounds", args.hold_rounds, 1),
                               ("--horizon", args.horizon, 0)):
        if value is not None and not value >= low:
            raise CqoptError(f"{option} {value}: needs a number >= {low}")


def policy_options(args: argparse.Namespace) -> dict[str, Any]:
    """:meth:`AdaptiveQuery.costed <cqopt.runtime.adaptive.AdaptiveQuery.costed>`'s
    keyword arguments from the command line."""
    from cqopt.runtime.adaptive import Hysteresis
    from cqopt.runtime.choice import PricedSwitch

    hysteresis = {"none": None, "margin": Hysteresis(args.margin, args.hold_rounds),
                  "priced": PricedSwitch(args.horizon)}[args.hysteresis]
    return {"estimator": args.estimator, "d": args.d, "decay": args.decay,
            "choice": args.choice, "residuals": args.residuals, "fallback": args.fallback,
            "hysteresis": hysteresis, "off_chart": args.off_chart == "cost"}


def describe_policy(args: argparse.Namespace) -> dict[str, str]:
    """The policy in words, for a report's header."""
    return {"estimator": f"{args.estimator} (d = {args.d}, decay = {args.decay})",
            "choice": args.choice + (f" over {args.residuals} rounds' errors"
                                     if args.choice == "expected" else ""),
            "off-chart": ("cost: rounds the chart does not cover run the plan costed cheapest "
                          "at their statistics" if args.off_chart == "cost" else
                          "chart: the chart's plan runs even where it does not cover a round"),
            "fallback": f"{args.fallback} rounds" if args.fallback else "none",
            "hysteresis": args.hysteresis + (f" (horizon {args.horizon:g} rounds)"
                                             if args.hysteresis == "priced" else
                                             f" (margin {args.margin:g}, {args.hold_rounds} "
                                             "rounds)" if args.hysteresis == "margin" else "")}
