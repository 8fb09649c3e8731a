"""Fuzz the query front end: mutated queries end in a result or one CqoptError, in time.

Each case mutates a valid CQL query over the DEC-PKT catalog (a character
dropped, inserted or doubled, tokens swapped, a keyword or parenthesis put
in, a literal replaced by thousands of digits, 1e999, a string with
newlines and control characters, a long IN list, deep nesting, a chain of
up to 40 joins with or without ON) and runs
what ``cqopt explain`` runs: parse and check the query, enumerate its plans,
cost them. The outcome of a case is

- ``ok``: a query and its plans;
- ``error``: a :class:`~cqopt.errors.CqoptError`, whose message the CLI
  prints as one line (control characters escaped);
- ``failure``: any other exception (a bug: the CLI would print a traceback);
- ``slow``: longer than the time budget (a bug too).

The script prints the count of each outcome and the first few failures;
``tests/test_fuzz_queries.py`` runs the same cases through hypothesis.

    python scripts/fuzz_queries.py --n 10000 [--seed 0] [--budget 5]
"""

from __future__ import annotations

import argparse
import collections
import random
import sys
import time
import traceback
from pathlib import Path

SEEDS = (
    "SELECT TCP.src_host, TCP.dest_host FROM TCP WHERE TCP.dest_host = 2 WINDOW [1]",
    "SELECT * FROM TCP, UDP, SF WHERE TCP.src_host = UDP.dest_host AND "
    "UDP.dest_host = SF.dest_host WINDOW [1]",
    "SELECT TCP.src_host, COUNT(*) FROM TCP [RANGE 10 SECONDS] WHERE TCP.bytes > 100 "
    "AND TCP.bytes < 2000 GROUP BY TCP.src_host",
    "SELECT UDP.src_host FROM UDP WHERE UDP.src_port IN (53, 67, 123) OR UDP.src_port "
    "BETWEEN 1000 AND 2000 WINDOW [1]",
    "SELECT * FROM TCP, UDP WHERE TCP.src_host = UDP.src_host AND NOT TCP.dest_port = 80 "
    "WINDOW [2 SECONDS]",
)
WORDS = ("SELECT", "FROM", "WHERE", "AND", "OR", "NOT", "IN", "BETWEEN", "GROUP BY",
         "WINDOW", "[", "]", "(", ")", ",", "*", "=", "<>", "<", ">=", "RANGE", "ROWS",
         "SECONDS", "COUNT(*)", "SUM(TCP.bytes)", "TCP.ts", "UDP", "SF.bytes", "NULL",
         "'x'", "-", ".", ";", "--", "/*", "\\", '"')
LITERALS = (
    lambda rng: "9" * rng.choice((20, 400, 4301, 5000)),
    lambda rng: "1e999",
    lambda rng: "-1e-400",
    lambda rng: "'" + "".join(rng.choice("ab\n\r\t\x1b\x00\x7f'é\u202e") for _ in range(8)) + "'",
    lambda rng: "0x" + "f" * rng.randint(1, 40),
    lambda rng: str(rng.random() * 10 ** rng.randint(-300, 300)),
)


def in_list(rng: random.Random, n: int) -> str:
    values = (str(rng.randint(-10**6, 10**6)) for _ in range(n))
    return f"TCP.dest_host {'NOT ' if rng.random() < 0.3 else ''}IN ({', '.join(values)})"


def mutate(rng: random.Random, sql: str, max_in: int = 5000) -> str:
    """One random mutation (or a few) of ``sql``."""
    for _ in range(rng.choice((1, 1, 1, 2, 3))):
        kind = rng.randrange(10)
        i = rng.randrange(len(sql) + 1)
        if kind == 0 and sql:  # drop a character
            sql = sql[:i] + sql[i + 1:]
        elif kind == 1:  # insert a character, printable or not
            sql = sql[:i] + rng.choice("()[],.;'\"*=<>-\n\t\x1b\x00é") + sql[i:]
        elif kind == 2:  # insert a keyword or token
            sql = sql[:i] + " " + rng.choice(WORDS) + " " + sql[i:]
        elif kind == 3:  # swap two tokens
            words = sql.split(" ")
            a, b = rng.randrange(len(words)), rng.randrange(len(words))
            words[a], words[b] = words[b], words[a]
            sql = " ".join(words)
        elif kind == 4:  # replace a number with a hostile literal
            digits = [j for j, c in enumerate(sql) if c.isdigit()]
            if digits:
                j = rng.choice(digits)
                sql = sql[:j] + rng.choice(LITERALS)(rng) + sql[j + 1:]
        elif kind == 5:  # a long IN list as a further conjunct
            n = rng.choice((10, 1000, max_in))
            where = sql.find("WHERE ")
            sql = (sql[:where + 6] + in_list(rng, n) + " AND " + sql[where + 6:]) \
                if where >= 0 else sql
        elif kind == 6:  # deep nesting
            depth = rng.choice((10, 200, 3000))
            where = sql.find("WHERE ")
            if where >= 0:
                rest = sql[where + 6:]
                cut = rest.find(" WINDOW") if " WINDOW" in rest else len(rest)
                sql = sql[:where + 6] + "(" * depth + rest[:cut] + ")" * depth + rest[cut:]
        elif kind == 7:  # a long OR chain
            n = rng.choice((10, 500, 2000))
            where = sql.find("WHERE ")
            chain = " OR ".join(f"TCP.src_port = {k}" for k in range(n))
            sql = (sql[:where + 6] + f"({chain}) AND " + sql[where + 6:]) if where >= 0 else sql
        elif kind == 8:  # a chain of joins, with or without ON (sqlglot once took 2^n)
            n = rng.choice((4, 16, 24, 40))
            joins = "".join(
                f", {rng.choice(('TCP', 'UDP', 'SF'))} AS j{k}" if rng.random() < 0.2 else
                f" {rng.choice(('JOIN', 'CROSS JOIN'))} {rng.choice(('TCP', 'UDP', 'SF'))} "
                f"AS j{k}" + rng.choice(("", f" ON j{k}.src_host = 1")) for k in range(n))
            at = sql.find(" WHERE") if " WHERE" in sql else sql.find(" WINDOW")
            sql = sql[:at] + joins + sql[at:] if at >= 0 else sql
        else:  # duplicate a stretch
            j = rng.randrange(len(sql) + 1)
            sql = sql[:i] + sql[min(i, j):max(i, j)] + sql[i:]
    return sql


def run_case(sql: str, catalog) -> str:
    """What ``cqopt explain`` does with ``sql``: 'ok', or raise what it raises."""
    from cqopt.costmodel import DEFAULT_WEIGHTS, Utility, make_model
    from cqopt.optimizer.query.logical import parse_query
    from cqopt.optimizer.query.statistics import default_value
    from cqopt.optimizer.rules.enumerate import enumerate_plans

    query = parse_query(sql, catalog)
    values = {s: default_value(s, catalog, query) for s in query.statistics}
    model = make_model("om", catalog)
    utility = Utility.from_weights(DEFAULT_WEIGHTS)
    plans = enumerate_plans(query, catalog=catalog,
                            cost=lambda p: float(utility(model.cost(p, values))))
    for plan in plans:
        utility(model.cost(plan, values))
        plan.explain()
    query.describe()
    return "ok"


def outcome(sql: str, catalog, budget: float) -> tuple[str, str]:
    """(outcome, detail) of one case; see the module docstring."""
    from cqopt.errors import CqoptError, error_line

    start = time.perf_counter()
    try:
        result, detail = run_case(sql, catalog), ""
    except CqoptError as err:
        line = error_line(err)  # what the CLI prints
        result, detail = ("error", line) if "\n" not in line else ("failure", line)
    except Exception:  # noqa: BLE001 - any other exception is what the fuzzer looks for
        result, detail = "failure", traceback.format_exc(limit=3)
    if time.perf_counter() - start > budget:
        return "slow", f"{time.perf_counter() - start:.2f} s"
    return result, detail


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1000, help="cases (default 1000)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--budget", type=float, default=5.0, help="seconds a case may take")
    args = parser.parse_args()
    from cqopt.catalog import load_catalog

    catalog = load_catalog(Path(__file__).resolve().parents[1] / "examples" / "dec-pkt.toml")
    rng = random.Random(args.seed)
    counts: collections.Counter = collections.Counter()
    examples: list[tuple[str, str, str]] = []
    start = time.perf_counter()
    for _ in range(args.n):
        sql = mutate(rng, rng.choice(SEEDS))
        result, detail = outcome(sql, catalog, args.budget)
        counts[result] += 1
        if result in ("failure", "slow") and len(examples) < 5:
            examples.append((result, sql[:300], detail))
    seconds = time.perf_counter() - start
    print(f"{args.n} cases in {seconds:.0f} s (seed {args.seed}, budget {args.budget:g} s):")
    for name in ("ok", "error", "failure", "slow"):
        print(f"  {name:<8} {counts[name]}")
    for result, sql, detail in examples:
        print(f"\n{result}: {sql!r}\n{detail}")
    return 1 if counts["failure"] or counts["slow"] else 0


if __name__ == "__main__":
    sys.exit(main())
