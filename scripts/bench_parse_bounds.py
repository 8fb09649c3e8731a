"""Benchmark: parsing a query stays linear in its joins, IN-list values and nesting.

Prints the median time of :func:`cqopt.optimizer.query.dialect.parse` for a chain of
n ``JOIN`` s without ON (sqlglot's nested-join retry made it 2^n: 16 joins
took seconds, 24 minutes), the same chain with ON, an IN list of n values and
n nested parentheses, up to the bounds parse enforces, each with its ratio to
the smallest case measured in the same run: a linear parse keeps the ratio
near the ratio of the sizes. Past a bound the query is refused, also timed.

    python scripts/bench_parse_bounds.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import statistics
import time

from cqopt.errors import CqoptError
from cqopt.optimizer.query.dialect import MAX_IN_VALUES, MAX_NESTING, MAX_STREAMS, parse


def median_seconds(sql: str, repeat: int) -> tuple[float, str]:
    times, result = [], "ok"
    for _ in range(repeat):
        start = time.perf_counter()
        try:
            parse(sql)
        except CqoptError:
            result = "refused"
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


CASES = {
    "JOIN chain, no ON": (lambda n: "SELECT TCP.a FROM TCP" + " JOIN UDP" * (n - 1)
                          + " WINDOW [1]", (2, 8, 16, 24, MAX_STREAMS, 4 * MAX_STREAMS)),
    "JOIN chain, ON": (lambda n: "SELECT TCP.a FROM TCP" + "".join(
        f" JOIN UDP AS u{i} ON u{i}.a = TCP.a" for i in range(n - 1)) + " WINDOW [1]",
        (2, 8, 16, 24, MAX_STREAMS, 4 * MAX_STREAMS)),
    "IN list values": (lambda n: "SELECT TCP.a FROM TCP WHERE TCP.a IN ("
                       + ", ".join(map(str, range(n))) + ") WINDOW [1]",
                       (100, 1_000, MAX_IN_VALUES, 10 * MAX_IN_VALUES)),
    "nested parentheses": (lambda n: "SELECT TCP.a FROM TCP WHERE " + "(" * n + "TCP.a = 1"
                           + ")" * n + " WINDOW [1]", (1, 8, MAX_NESTING, 1000)),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    print(f"{'case':<20} {'n':>7} {'median s':>9} {'ratio':>7} {'n ratio':>8}  result")
    for name, (make, sizes) in CASES.items():
        base = None
        for n in sizes:
            seconds, result = median_seconds(make(n), args.repeat)
            base = base or (seconds, n)
            print(f"{name:<20} {n:7d} {seconds:9.5f} {seconds / base[0]:7.1f} "
                  f"{n / base[1]:8.1f}  {result}")


if __name__ == "__main__":
    main()
