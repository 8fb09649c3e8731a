"""The ``cqopt`` command line.

Each command parses its options, calls its :mod:`cqopt.api` function and prints what it
returns (``explain`` here, the others in their modules). Every failure a user can cause
ends as one line on stderr, ``cqopt: error: ...``, and exit status 2; no traceback.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Sequence

import cqopt
from cqopt.cli import calibrate_command, chart_commands, fidelity_commands, options, run_command
from cqopt.cli.chart_commands import parse_stat, parse_weights
from cqopt.cli.extras import missing_extras
from cqopt.cli.options import option_namer
from cqopt.costmodel import model_names
from cqopt.errors import CqoptError, error_line
from cqopt.optimizer.rules.enumerate import rule_names

EXIT_USAGE = 2


def cmd_explain(args: argparse.Namespace) -> int:
    from cqopt.api import explain

    found = explain(args.catalog, sql=args.sql, workload=args.workload, query=args.query,
                    stats=dict(args.stat or []), model=args.model,
                    weights=parse_weights(args.weights), without=args.without or (),
                    sql_out=args.sql_out, analyze=args.analyze, round=args.round,
                    name=option_namer(args, as_given=("model", "weights"), stats="--stat"))
    if args.json:
        print(json.dumps(found.to_dict(), indent=2, ensure_ascii=False))
    else:
        print(found.text())
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
    p.add_argument("--model", default=None, metavar="MODEL",
                   help=f"cost model: {', '.join(model_names())} (default: with --workload, "
                        "each query's chart's model; else om)")
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
