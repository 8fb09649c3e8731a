"""The ``cqopt`` command line.

Every failure a user can cause ends as one line on stderr, ``cqopt: error:
...``, and exit status 2; no traceback.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
import textwrap
from typing import Any
from collections.abc import Sequence

import cqopt
from cqopt.catalog import load_catalog
from cqopt.charts.settings import ChartSettings
from cqopt.charts.workload import load_workload
from cqopt.cli import calibrate_command, chart_commands, fidelity_commands, options, run_command
from cqopt.cli.chart_commands import chart_options, parse_stat
from cqopt.cli.extras import missing_extras
from cqopt.costmodel import Utility, make_model, model_names, plan_utilities
from cqopt.errors import CqoptError, did_you_mean, error_line
from cqopt.optimizer.plans.sql import plan_sql
from cqopt.optimizer.query.logical import ContinuousQuery, parse_query
from cqopt.optimizer.query.statistics import DEFAULT_SELECTIVITY, default_value
from cqopt.optimizer.rules.enumerate import enumerate_plans, rule_names, rules_without

EXIT_USAGE = 2


def _queries(args: argparse.Namespace, catalog, options: dict[str, Any] | None = None
             ) -> list[tuple[str, ContinuousQuery, Any]]:
    """The (name, query, chart spec) triples a command works on: --sql (no spec), or a
    workload's queries with the chart spec each is built with (``options`` over the file's
    settings)."""
    if args.sql is not None:
        if args.query:
            raise CqoptError("--query names a query of --workload; with --sql leave it out")
        return [("query", parse_query(args.sql, catalog), None)]
    from cqopt.charts.spec import workload_specs

    workload = load_workload(args.workload)
    if args.query:
        workload.query(args.query)  # an unknown name, with did-you-mean
    try:
        specs = workload_specs(workload, catalog, options)
    except CqoptError as err:
        raise CqoptError(f"{workload.source}: {err}") from None
    return [(spec.name, q, spec) for spec, q in specs
            if not args.query or spec.name == args.query]


def _statistics(query: ContinuousQuery, given: dict[str, float], catalog, spec=None
                ) -> dict[str, tuple[float, str]]:
    """Every statistic of ``query``: (value, where it came from: ``given``, ``chart`` (the
    workload's chart: a fixed value, or the middle of an axis) or ``default``)."""
    chart = {} if spec is None else {**spec.centre(), **spec.fixed}
    return {name: (given[name], "given") if name in given
            else (chart[name], "chart") if name in chart
            else (default_value(name, catalog, query), "default") for name in query.statistics}


def _costs(plans, values: dict[str, float], model, utility
           ) -> list[tuple[dict[str, float], Any]]:
    """Each plan's totals and its cost (per operator too), costed once."""
    # At one point: the generated scalar path, and one utility call over all plans.
    utilities = plan_utilities(model, utility, plans, values)
    out = []
    for plan, plan_utility in zip(plans, utilities):
        cost = model.cost(plan, values)
        out.append(({"rate": float(cost.rate), "memory": float(cost.memory),
                     "cpu": float(cost.cpu), "utility": float(plan_utility)}, cost))
    return out


def _operator_notes(plan, cost, window_s: float | None, run=None) -> dict[str, str]:
    """Each operator's estimates (and, from ``run``, the rows it emitted), for the tree."""
    notes = {}
    for key, op in cost.operators.items():
        text = (f"(rate {float(op.rate):.4g}/s, memory {float(op.memory):.4g} B, "
                f"cpu {float(op.cpu):.3g} s/s")
        if run is not None:
            text += (f"; rows estimated {float(op.rate) * window_s:.4g}, "
                     f"actual {run.operators[key].emitted}")
        notes[key] = text + ")"
    return notes


def _plan_object(plan, costs: dict[str, float], cost, query, windows, window_s: float | None,
                 sql_out: str | None) -> dict[str, Any]:
    """One plan of ``explain``: its id, totals, per-operator estimates (``cost``; and,
    given a round's ``windows``, the rows each operator emitted on it) and its tree."""
    run = None
    if windows is not None:  # --analyze: the reference executor needs pandas (an extra)
        from cqopt.costmodel.reference_executor import execute

        run = execute(plan, query, windows)
    operators = {key: {"rate": float(op.rate), "memory": float(op.memory),
                       "cpu": float(op.cpu),
                       **({"rows_estimated": float(op.rate) * window_s,
                           "rows_actual": run.operators[key].emitted} if run else {})}
                 for key, op in cost.operators.items()}
    return {"id": plan.id, "cost": costs, "operators": operators,
            "tree": plan.explain(_operator_notes(plan, cost, window_s, run)),
            **({"sql": plan_sql(plan, sql_out, query=query)} if sql_out else {})}


def cmd_explain(args: argparse.Namespace) -> int:
    rules = rules_without(args.without or [])
    catalog = load_catalog(args.catalog)
    options = chart_options(args, ("model", "weights"))[0]
    queries = _queries(args, catalog, options)
    if args.round is not None and args.analyze is None:
        raise CqoptError(f"--round {args.round}: a round of --analyze TRACES; give the traces")
    paths = None
    if args.analyze is not None:
        if args.stat:
            raise CqoptError("--stat with --analyze: the plans are costed at the round's "
                             "measured statistics; leave out one of them")
        paths = cqopt.api.trace_paths(catalog, None, args.analyze,
                                      lambda _, value: f"--analyze {value}")
    given = dict(args.stat or [])
    unused = set(given) - {s for _, q, _ in queries for s in q.statistics}
    if unused:
        known = list(dict.fromkeys(s for _, q, _ in queries for s in q.statistics))
        first = sorted(unused)[0]
        raise CqoptError(f"--stat {', '.join(sorted(unused))}: no query here depends on it "
                         f"(the statistics are {', '.join(known)}){did_you_mean(first, known)}")
    objects, costing = [], []
    for name, q, spec in queries:
        # A workload's query is costed as its chart is: its model, weights and statistics.
        settings = (ChartSettings.from_values(options) if spec is None else
                    ChartSettings(model=spec.model, weights=spec.weights,
                                  memory_unit=spec.memory_unit))
        model = make_model(settings.model, catalog, settings.memory_unit)
        utility = Utility.from_weights(settings.weights)
        costing.append((model, utility))
        windows = window_s = None
        if paths is not None:  # the round's tuples and its measured statistics
            from cqopt.costmodel.validation import window_statistics
            from cqopt.replay.round_window import round_windows

            window_s = q.round_seconds()
            windows = round_windows(q, paths, args.round or 0, window_s)
            measured = window_statistics(q, windows, window_s)
            label = f"round {args.round or 0}"
            stats = {s: (measured[s], label) if math.isfinite(measured.get(s, math.nan))
                     else (value, source) for s, (value, source)
                     in _statistics(q, {}, catalog, spec).items()}
        else:
            stats = _statistics(q, given, catalog, spec)
        values = {name: value for name, (value, _) in stats.items()}
        # Past the exhaustive limit, the local search orders joins by this model at these stats.
        # A model that prices join strategies keeps those cheapest at these statistics.
        strategy_cost = (lambda ps: plan_utilities(model, utility, ps, values)[:, None]) \
            if getattr(model, "prices_join_strategies", False) else None
        plans = enumerate_plans(q, catalog=catalog, rules=rules,
                                cost=lambda p: float(plan_utilities(model, utility, [p],
                                                                    values)[0]),
                                strategy_cost=strategy_cost)
        costed = _costs(plans, values, model, utility)
        costs = [totals for totals, _ in costed]
        best = min(range(len(plans)), key=lambda i: (costs[i]["utility"], plans[i].id))
        # With no output at all (a contradiction, an empty stream) no plan is cheaper.
        chosen = plans[best] if math.isfinite(costs[best]["utility"]) else None
        objects.append({"name": name, "query": q.to_dict(), "model": model.name,
                        "rules": list(rule_names(rules)),
                        "weights": [utility.w_r, utility.w_m, utility.w_c],
                        "statistics": {s: {"value": v, "default": d == "default",
                                           "source": d} for s, (v, d) in stats.items()},
                        "plans": [_plan_object(p, totals, cost, q, windows, window_s,
                                               args.sql_out)
                                  for p, (totals, cost) in zip(plans, costed)],
                        "chosen": chosen.id if chosen else None})
    if args.json:
        print(json.dumps(objects[0] if len(objects) == 1 else {"queries": objects}, indent=2,
                         ensure_ascii=False))
        return 0
    for i, ((name, q, spec), obj, (model, utility)) in enumerate(zip(queries, objects,
                                                                      costing)):
        if i:
            print()
        print(f"== {name}")
        print(q.sql)
        print()
        print(q.describe())
        print()
        stats = ", ".join(f"{s}={v['value']:g}" + ("" if v["source"] == "given"
                                                   else f" ({v['source']})")
                          for s, v in obj["statistics"].items())
        if args.without:
            print(f"Rules: {', '.join(obj['rules'])} (without {', '.join(args.without)})")
        weights = (utility.w_r, utility.w_m) + ((utility.w_c,) if utility.w_c else ())
        print(f"Costed with the {model.name.upper()} model, weights "
              f"({', '.join(f'{w:g}' for w in weights)}), at {stats}")
        if spec is not None and any(v["source"] == "chart" for v in obj["statistics"].values()):
            print(f"  (chart: the value the workload's chart of {name} fixes, or the middle of "
                  "its axis)")
        if args.analyze is not None:
            print(f"  (round {args.round or 0}: measured on that round of the traces in "
                  f"{args.analyze}; each operator's actual rows are its output on it, by "
                  "the reference executor)")
        print("  (defaults: the middle of the catalog's range for a rate, "
              f"{DEFAULT_SELECTIVITY} for a selectivity, 0 for a contradiction's)")
        print()
        if obj["chosen"] is None:
            print("Every plan costs infinitely much here (the query emits nothing): none is "
                  "cheaper.")
        print(f"Candidate plans ({len(obj['plans'])}):")
        for number, plan in enumerate(obj["plans"], 1):
            c = plan["cost"]
            mark = "  <- cheapest" if plan["id"] == obj["chosen"] else ""
            print(f"  {number}. {plan['id']}  rate {c['rate']:.4g}/s  memory "
                  f"{c['memory']:.4g} B  cpu {c['cpu']:.3g} s/s  utility {c['utility']:.6g}"
                  f"{mark}")
            print(textwrap.indent(plan["tree"], "     "))
            if "sql" in plan:
                print(f"     SQL ({args.sql_out}):")
                print(textwrap.indent(plan["sql"], "       "))
    return 0


def _add_query_source(p: argparse.ArgumentParser) -> None:
    p.add_argument("--catalog", type=options.input_file, required=True, metavar="CATALOG",
                   help="stream catalog (TOML), e.g. examples/dec-pkt.toml")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--sql", metavar="QUERY", help="a CQL query text")
    src.add_argument("--workload", type=options.input_file, metavar="W",
                     help="workload file (TOML) of named queries")
    p.add_argument("--query", metavar="NAME",
                   help="with --workload: the query to use (default: every query)")


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(
        prog="cqopt",
        description="Cost-based optimizer for continuous queries over data streams. A "
                    "--catalog or --workload examples/NAME that is not in this folder is the "
                    "example bundled with cqopt, said on stderr, so every command's example "
                    "runs from any folder.")
    parser.add_argument("--version", action="version", version=f"cqopt {cqopt.__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    p = sub.add_parser(
        "explain", help="show the logical query and what it depends on",
        description="Parse continuous queries, check them against the catalog and print the "
                    "logical query: streams and windows, grouped selections, join predicates "
                    "with their transitive closure, projection, aggregates, tuple widths and "
                    "the statistics its cost depends on; then every candidate plan (OM's "
                    "heuristics) with its id and operator tree.")
    _add_query_source(p)
    p.add_argument("--stat", action="append", metavar="NAME=VALUE", type=parse_stat,
                   help="a statistic to cost the plans at, e.g. rate.TCP=500 or sel.TCP=0.3 "
                        "(repeatable; others take their defaults)")
    p.add_argument("--model", default="om", metavar="MODEL",
                   help=f"cost model: {', '.join(model_names())} (default om)")
    p.add_argument("--weights", metavar="WR,WM[,WC]", help="utility weights (default 0.4,0.6)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--sql-out", metavar="DIALECT", type=options.dialect,
                   help="also print each plan as SQL of this sqlglot dialect (spark, hive, "
                        "postgres, duckdb, ...), shaped like the plan")
    p.add_argument("--without", action="append", metavar="RULE",
                   help="enumerate without this rule, for an ablation (repeatable): "
                        + ", ".join(rule_names()))
    p.add_argument("--analyze", metavar="TRACES",
                   help="run every plan on one round of these traces (a folder of "
                        "STREAM.csv, STREAM.parquet, ...) in this process and print each "
                        "operator's actual rows beside the estimate, the plans costed at the "
                        "round's measured statistics")
    p.add_argument("--round", type=options.number(integer=True, low=0), metavar="N",
                   help="with --analyze: the round to run (default 0, the first)")
    p.set_defaults(run=cmd_explain)
    chart_commands.add_parsers(sub)
    fidelity_commands.add_parsers(sub)
    calibrate_command.add_parsers(sub)
    run_command.add_parsers(sub)
    return parser


# Every subcommand's help ends with a worked example (tests check that each has one), that
# runs as written from any folder: examples/NAME is the bundled example when this folder has
# none (said on stderr), everything is written under out/, and an example that reads what
# another writes names it ("run cqopt build's example first").
EXAMPLES = {
    "explain": """\
examples (the second reads out/traces: run cqopt generate's example first):
  cqopt explain --catalog examples/dec-pkt.toml \\
      --sql "SELECT * FROM TCP WHERE TCP.dest_host = 2 WINDOW [1]" --stat rate.TCP=500
  cqopt explain --catalog examples/dec-pkt.toml --workload examples/workload.toml \\
      --query Q1 --analyze out/traces --round 3""",
    "build": """\
example (writes out/charts, which the examples of choose, show, fidelity and run read):
  cqopt build --catalog examples/dec-pkt.toml --workload examples/workload.toml \\
      --out out/charts --engine local""",
    "choose": """\
example (reads out/charts: run cqopt build's example first):
  cqopt choose --charts out/charts --query Q1 --stat rate.TCP=500 --stat sel.TCP=0.3""",
    "show": """\
example (reads out/charts: run cqopt build's example first):
  cqopt show --charts out/charts --query Q2 --out out/q2.png --stat rate.SF=300""",
    "generate": """\
example (writes out/traces, which the examples of explain and fidelity read):
  cqopt generate --catalog examples/dec-pkt.toml --out out/traces --duration 60 \\
      --steady TCP.src_host --steady UDP.dest_host --steady SF.dest_host""",
    "fidelity": """\
examples (--traces DIR, or one --trace STREAM=PATH per stream instead; the second adds
a deadline per round, shared by the queries, and a memory budget, all replayed; both
read out/charts and out/traces: run cqopt build's and cqopt generate's examples first):
  cqopt fidelity --catalog examples/dec-pkt.toml --workload examples/workload.toml \\
      --charts out/charts --traces out/traces --out out/report
  cqopt fidelity --catalog examples/dec-pkt.toml --workload examples/workload.toml \\
      --charts out/charts --traces out/traces --out out/report-overload --k-sweep none \\
      --deadline 0.8 --negotiate --memory-budget 40k""",
    "calibrate": """\
examples (operator rates timed on Spark; the engine model fitted to a run's plan times,
from out/run: run cqopt run's example first):
  cqopt calibrate --catalog examples/dec-pkt.toml --out out/calibrated.toml
  cqopt calibrate --catalog examples/dec-pkt.toml --from-run out/run --out out/engine.toml""",
    "run": """\
example (each --source a directory of round files, as generate --file-per-round writes;
--shadow also times every candidate plan, which cqopt calibrate --from-run fits; reads
out/charts: run cqopt build's example first):
  cqopt generate --catalog examples/dec-pkt.toml --streams TCP --duration 20 \\
      --file-per-round 1 --out out/rounds
  cqopt run --catalog examples/dec-pkt.toml --workload examples/workload.toml \\
      --charts out/charts --query Q1 --source TCP=out/rounds/TCP --out out/run --shadow""",
}


class ArgumentParser(argparse.ArgumentParser):
    """argparse, with the CLI's contract: a usage error is one line, and help ends with
    the command's worked example, printed as written."""

    def error(self, message: str):
        # "argument --d: '0': needs ..." (an options.number refusal) as "--d '0': needs ...",
        # as the commands' own checks word it.
        message = re.sub(r"^argument (-[\w-]+)(?:/-[\w-]+)*: (?=')", r"\1 ", message)
        command = self.prog.removeprefix("cqopt").strip()
        hint = f"cqopt {command} --help" if command else "cqopt --help"
        self.exit(EXIT_USAGE, f"cqopt: error: {error_line(message)} (see {hint})\n")

    def parse_args(self, args=None, namespace=None):
        # An unknown option is the subcommand's to explain: its usage error names its help.
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            commands = next((a.choices for a in self._actions
                             if isinstance(a, argparse._SubParsersAction)), {})
            parser = commands.get(getattr(parsed, "command", None), self)
            parser.error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed

    def format_help(self) -> str:
        example = EXAMPLES.get(self.prog.removeprefix("cqopt").strip())
        text = super().format_help()
        return text + "\n" + example + "\n" if example else text


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = None
    try:
        try:
            args = parser.parse_args(argv)
        except SystemExit as exit_:  # --help, --version, or a usage error's line: printed
            return exit_.code if isinstance(exit_.code, int) else EXIT_USAGE
        return args.run(args)
    except CqoptError as err:
        print(f"cqopt: error: {error_line(err)}", file=sys.stderr)
        return EXIT_USAGE
    except ModuleNotFoundError as err:
        message = missing_extras(getattr(args, "command", None), err.name)
        if message is None:
            raise
        print(f"cqopt: error: {message}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("cqopt: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader left (cqopt explain ... | head -1): stop quietly; point stdout at
        # /dev/null so the interpreter's final flush does not complain either.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1


if __name__ == "__main__":
    sys.exit(main())
