"""Benchmark: grouping a long IN list into one selection grows as n log n.

Prints the median time of ``group_selections`` over an IN list of n values
(and of an IN list met by a NOT IN list of n values), for n = 1,000 up to
100,000, and each time's ratio to the 1,000-value baseline measured in the
same run: a linear-logarithmic grouping keeps the ratio near
n / 1000 * log(n) / log(1000), a quadratic one near (n / 1000)^2.

    python scripts/bench_in_list.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import math
import statistics
import time

import sqlglot

from cqopt.optimizer.query.selections import group_selections


def median_seconds(conjuncts, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        group_selections("S", conjuncts)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    base = None
    print(f"{'n':>8} {'IN s':>8} {'ratio':>7} {'IN+NOT IN s':>12} {'n log n ratio':>14}")
    for n in (1_000, 10_000, 100_000):
        in_list = sqlglot.parse_one("S.a IN (" + ", ".join(map(str, range(n))) + ")")
        not_in = sqlglot.parse_one("S.a NOT IN (" + ", ".join(map(str, range(0, 2 * n, 2)))
                                   + ")")
        alone = median_seconds([in_list], args.repeat)
        both = median_seconds([in_list, not_in], args.repeat)
        base = base or alone
        expected = n / 1000 * math.log(n) / math.log(1000)
        print(f"{n:8d} {alone:8.3f} {alone / base:7.1f} {both:12.3f} {expected:14.1f}")


if __name__ == "__main__":
    main()
