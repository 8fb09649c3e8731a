"""What the list of rules costs: enumerate_plans against building the same plans directly.

The baseline builds every candidate straight from the join orders and the σ/π
combinations with one PlanBuilder (what the enumeration did before it ran as
rules); ``enumerate_plans`` builds them through the rules and checks the plan
contract after each. Queries: chains of n streams with a two-conjunct
selection on each (σ and π on every stream), n = 2..5, and 7 (the local search).
Then the time of two enumerations the tests bound by the plans they build: the
local search over 8 streams, and a clique of 6 streams whose 23,040 plans the
plan budget cuts to 4,096 at most.

    python scripts/bench_enumerate.py [--repeat 7]
"""

from __future__ import annotations

import argparse
import statistics
import time

from cqopt.catalog import Catalog
from cqopt.optimizer.plans.builder import PlanBuilder
from cqopt.optimizer.query.logical import parse_query
from cqopt.optimizer.rules.enumerate import enumerate_plans
from cqopt.optimizer.rules.join_order_search import intermediate_size_cost, local_search_orders
from cqopt.optimizer.rules.left_deep import join_orders
from cqopt.optimizer.rules.pushdown import stream_order_combinations

COLUMNS = {"k": "int", "a": "int", "b": "int", "c": "int"}


def chain_query(n: int):
    catalog = Catalog.from_dict({"streams": {f"S{i}": {"rate": [1, 10], "columns": COLUMNS}
                                             for i in range(1, n + 1)}})
    joins = [f"S{i}.k = S{i + 1}.k" for i in range(1, n)]
    selections = [f"S{i}.a > 1 AND S{i}.b < 5" for i in range(1, n + 1)]
    sql = (f"SELECT S1.c FROM {', '.join(f'S{i}' for i in range(1, n + 1))} "
           f"WHERE {' AND '.join(joins + selections)} WINDOW [1]")
    return parse_query(sql, catalog), catalog


def direct(query, catalog, max_exhaustive=6, max_plans=4096, keep=3):
    builder = PlanBuilder(query)
    combos = stream_order_combinations(query)
    orders = join_orders(query) if len(query.streams) <= max_exhaustive else None
    if orders is None or len(orders) * len(combos) > max_plans:
        kept = max(1, min(keep, max_plans // len(combos)))
        orders = local_search_orders(query, intermediate_size_cost(catalog), keep=kept,
                                     builder=builder)
    return [builder.build(order, combo) for order in orders for combo in combos]


def median_ms(run, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    print(f"{'streams':>7} {'plans':>6} {'direct ms':>10} {'rules ms':>9} {'ratio':>6}")
    for n in (2, 3, 4, 5, 7):
        query, catalog = chain_query(n)
        plans = enumerate_plans(query, catalog=catalog)
        assert [p.id for p in plans] == [p.id for p in direct(query, catalog)]
        base = median_ms(lambda: direct(query, catalog), args.repeat)
        ruled = median_ms(lambda: enumerate_plans(query, catalog=catalog), args.repeat)
        print(f"{n:>7} {len(plans):>6} {base:>10.2f} {ruled:>9.2f} {ruled / base:>6.2f}")
    for label, query, catalog in _searched():
        plans = enumerate_plans(query, catalog=catalog)
        ms = median_ms(lambda: enumerate_plans(query, catalog=catalog), args.repeat)
        print(f"{label}: {len(plans)} plans in {ms:.1f} ms (median of {args.repeat})")


def _searched():
    """8 streams in a chain with two more joins (the local search), and a clique of 6 with
    σ and π on every stream (the plan budget): tests/test_plans.py's queries."""
    def catalog(n):
        return Catalog.from_dict({"streams": {
            f"S{i}": {"rate": [10 * i, 100 * i], "columns": {c: "int" for c in "kabcdefgh"}}
            for i in range(1, n + 1)}})

    columns = "kabcdefgh"
    edges = [(i, i + 1) for i in range(1, 8)] + [(2, 6), (3, 8)]
    joins = [f"S{i}.{columns[j]} = S{j}.{columns[i]}" for i, j in edges]
    eight = parse_query("SELECT S1.k, S8.k FROM " + ", ".join(f"S{i}" for i in range(1, 9))
                        + " WHERE " + " AND ".join(joins + ["S2.k > 3", "S5.k = 1"])
                        + " WINDOW [1]", catalog(8))
    clique = [f"S{i}.a = S{i + 1}.a" for i in range(1, 6)] + [f"S{i}.b = 1" for i in range(1, 7)]
    six = parse_query("SELECT S1.k FROM " + ", ".join(f"S{i}" for i in range(1, 7))
                      + " WHERE " + " AND ".join(clique) + " WINDOW [1]", catalog(6))
    return [("8 streams, local search", eight, catalog(8)),
            ("a clique of 6, the plan budget", six, catalog(6))]


if __name__ == "__main__":
    main()
