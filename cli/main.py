"""The ``cqopt`` command line.

Every failure a user can cause ends as one line on stderr, ``cqopt: error:
...``, and exit status 2; no traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
from collections.abc import Sequence

from catalog import load_catalog
from cli import chart_commands
from catalog.errors import CqoptError
from optimizer.enumerate import enumerate_plans
from optimizer.logical import ContinuousQuery, parse_query
from optimizer.workload import load_workload

EXIT_USAGE = 2


def _queries(args: argparse.Namespace, catalog) -> list[tuple[str, ContinuousQuery]]:
    """The (name, query) pairs a command works on: --sql, or a workload's queries."""
    if args.sql is not None:
        if args.query:
            raise CqoptError("--query names a query of --workload; with --sql leave it out")
        return [("query", parse_query(args.sql, catalog))]
    workload = load_workload(args.workload)
    chosen = [workload.query(args.query)] if args.query else list(workload.queries)
    out = []
    for q in chosen:
        try:
            out.append((q.name, parse_query(q.sql, catalog)))
        except CqoptError as err:
            raise CqoptError(f"{workload.source}: query {q.name}: {err}") from None
    return out


def cmd_explain(args: argparse.Namespace) -> int:
    catalog = load_catalog(args.catalog)
    queries = _queries(args, catalog)
    plans = {name: enumerate_plans(q, catalog=catalog) for name, q in queries}
    if args.json:
        objects = [{"name": name, "query": q.to_dict(),
                    "plans": [{"id": p.id, "tree": p.explain()} for p in plans[name]]}
                   for name, q in queries]
        print(json.dumps(objects[0] if len(objects) == 1 else {"queries": objects}, indent=2))
        return 0
    for i, (name, q) in enumerate(queries):
        if i:
            print()
        print(f"== {name}")
        print(q.sql)
        print()
        print(q.describe())
        print()
        print(f"Candidate plans ({len(plans[name])}):")
        for number, plan in enumerate(plans[name], 1):
            print(f"  {number}. {plan.id}")
            print(textwrap.indent(plan.explain(), "     "))
    return 0


def _add_query_source(p: argparse.ArgumentParser) -> None:
    p.add_argument("--catalog", required=True, metavar="CATALOG",
                   help="stream catalog (TOML), e.g. examples/dec-pkt.toml")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--sql", metavar="QUERY", help="a CQL query text")
    src.add_argument("--workload", metavar="W", help="workload file (TOML) of named queries")
    p.add_argument("--query", metavar="NAME",
                   help="with --workload: the query to use (default: every query)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="cqopt",
        description="Cost-based optimizer for continuous queries over data streams.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    p = sub.add_parser(
        "explain", help="show the logical query and what it depends on",
        description="Parse continuous queries, check them against the catalog and print the "
                    "logical query: streams and windows, grouped selections, join predicates "
                    "with their transitive closure, projection, aggregates, tuple widths and "
                    "the statistics its cost depends on; then every candidate plan (OM's "
                    "heuristics) with its id and operator tree.")
    _add_query_source(p)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(run=cmd_explain)
    chart_commands.add_parsers(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.run(args)
    except CqoptError as err:
        print(f"cqopt: error: {err}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("cqopt: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
