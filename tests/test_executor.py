"""Tests for the reference executor (optimizer/executor.py).

Equivalence: for every test query, every candidate plan returns the same
multiset, and the same as a direct evaluation written here independently:
cross-merge all the windows, filter with a hand-written pandas condition,
then project (or aggregate in plain Python).
"""

from __future__ import annotations

import functools
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cqopt.catalog import Catalog, load_catalog
from cqopt.costmodel.reference_executor import execute, multiset, select_mask
from cqopt.optimizer.plans.nodes import node_attributes
from cqopt.optimizer.query.logical import parse_query
from cqopt.optimizer.rules.enumerate import enumerate_plans

ROOT = Path(__file__).resolve().parent.parent
ABCD = Catalog.from_dict({"streams": {s: {"rate": [10, 100], "columns": {
    "k": "int", "a": "int", "b": "int", "c": "int", "x": "double", "tag": "string(4)"}}
    for s in "ABCD"}})
DEC = load_catalog(ROOT / "examples/dec-pkt.toml")


def skewed(rng: np.random.Generator, n: int) -> np.ndarray:
    """Values 0..9, most of them small."""
    return np.minimum(rng.geometric(0.3, n) - 1, 9)


def with_duplicates(rng: np.random.Generator, frame: pd.DataFrame) -> pd.DataFrame:
    copies = frame.iloc[rng.integers(0, len(frame), len(frame) // 6)]
    out = pd.concat([frame, copies], ignore_index=True)
    return out.iloc[rng.permutation(len(out))].reset_index(drop=True)


def abcd_windows(rows: int, seed: int = 7) -> dict[str, pd.DataFrame]:
    rng = np.random.default_rng(seed)
    return {s: with_duplicates(rng, pd.DataFrame({
        "k": rng.integers(0, 10, rows), "a": skewed(rng, rows), "b": skewed(rng, rows),
        "c": skewed(rng, rows), "x": np.round(rng.normal(0, 3, rows) * 2) / 2,
        "tag": rng.choice(["x", "y", "zz", "w"], rows, p=[0.4, 0.3, 0.2, 0.1]),
    })) for s in "ABCD"}


def dec_windows(rows: int, seed: int = 11) -> dict[str, pd.DataFrame]:
    rng = np.random.default_rng(seed)
    return {s: with_duplicates(rng, pd.DataFrame({
        "ts": np.sort(rng.integers(0, 1_000_000, rows)), "src_host": skewed(rng, rows),
        "dest_host": skewed(rng, rows), "src_port": skewed(rng, rows) + 1000,
        "dest_port": skewed(rng, rows) + 20, "bytes": rng.integers(40, 1500, rows),
    })) for s in ("TCP", "UDP", "SF")}


def groups(frame: pd.DataFrame, keys: list[str]) -> dict[tuple, list[dict]]:
    """Rows of ``frame`` (as dicts) per value of ``keys``, in plain Python."""
    out: dict[tuple, list[dict]] = {}
    for row in frame.to_dict("records"):
        out.setdefault(tuple(row[k] for k in keys), []).append(row)
    return out


def dec_all(prefixes):
    cols = ["ts", "src_host", "dest_host", "src_port", "dest_port", "bytes"]
    return [f"{p}.{c}" for p in prefixes for c in cols]


@dataclass
class Case:
    name: str
    sql: str
    where: Callable[[pd.DataFrame], pd.Series] | None  # over the cross product
    output: list[str] | Callable[[pd.DataFrame], list[tuple]]  # columns, or rows
    rows: int = 300
    catalog: str = "abcd"
    selections: dict[str, Callable[[pd.DataFrame], pd.Series]] = field(default_factory=dict)


def _agg_group_having(f):
    out = []
    for (k,), g in groups(f, ["A.k"]).items():
        if len(g) > 190 and sum(r["B.c"] for r in g) >= 520:
            out.append((k, len(g), sum(r["B.b"] for r in g),
                        statistics.fmean(r["B.x"] for r in g),
                        min(r["A.a"] for r in g), max(r["B.a"] for r in g)))
    return out


def _agg_chain(f):
    return [(k, min(r["B.k"] for r in g), len(g)) for (k,), g in groups(f, ["B.k"]).items()]


def _agg_having_between_in(f):
    out = []
    for (k,), g in groups(f, ["A.k"]).items():
        n, top = len(g), max(r["A.tag"] for r in g)
        if (30 <= n <= 36 and n != 31) or k == 9:
            out.append((k, n, top))
    return out


def _agg_empty(f):
    return [(len(f), sum(f["A.a"]) if len(f) else None, max(f["A.x"]) if len(f) else None)]


CASES = [
    Case("single-sigma-pi", "SELECT A.a, A.b FROM A WHERE A.k > 3 AND A.k <= 7 WINDOW [1]",
         lambda f: (f["A.k"] > 3) & (f["A.k"] <= 7), ["A.a", "A.b"], rows=400),
    Case("Q1", "SELECT TCP.src_host, TCP.dest_host FROM TCP WHERE TCP.dest_host = 2 WINDOW [1]",
         lambda f: f["TCP.dest_host"] == 2, ["TCP.src_host", "TCP.dest_host"],
         rows=400, catalog="dec"),
    Case("Q2", "SELECT * FROM TCP, UDP, SF WHERE TCP.src_host = UDP.dest_host "
         "AND UDP.dest_host = SF.dest_host WINDOW [1]",
         lambda f: (f["TCP.src_host"] == f["UDP.dest_host"])
         & (f["UDP.dest_host"] == f["SF.dest_host"]),
         dec_all(["TCP", "UDP", "SF"]), rows=45, catalog="dec"),
    Case("chain-4", "SELECT A.k, D.c FROM A, B, C, D WHERE A.b = B.a AND B.b = C.a "
         "AND C.b = D.a AND B.k < 5 WINDOW [1]",
         lambda f: (f["A.b"] == f["B.a"]) & (f["B.b"] == f["C.a"]) & (f["C.b"] == f["D.a"])
         & (f["B.k"] < 5),
         ["A.k", "D.c"], rows=18, selections={"B": lambda w: w["k"] < 5}),
    Case("star-4", "SELECT A.k, B.a, C.b, D.c FROM A, B, C, D WHERE A.a = B.k AND A.b = C.k "
         "AND A.c = D.k AND D.a IN (0, 1, 3) WINDOW [1]",
         lambda f: (f["A.a"] == f["B.k"]) & (f["A.b"] == f["C.k"]) & (f["A.c"] == f["D.k"])
         & f["D.a"].isin([0, 1, 3]),
         ["A.k", "B.a", "C.b", "D.c"], rows=18,
         selections={"D": lambda w: w["a"].isin([0, 1, 3])}),
    Case("in-between-or", "SELECT A.k, A.a, A.tag FROM A WHERE (A.a BETWEEN 2 AND 5 OR A.a > 8) "
         "AND A.b IN (0, 1, 3) AND A.c <> 2 AND A.tag IN ('x', 'zz') WINDOW [1]",
         lambda f: (((f["A.a"] >= 2) & (f["A.a"] <= 5)) | (f["A.a"] > 8))
         & f["A.b"].isin([0, 1, 3]) & (f["A.c"] != 2) & f["A.tag"].isin(["x", "zz"]),
         ["A.k", "A.a", "A.tag"], rows=400),
    Case("or-ranges-double", "SELECT A.x, A.k FROM A "
         "WHERE A.x < -2.5 OR A.x >= 1 AND A.x < 3.5 OR A.x = 0 WINDOW [1]",
         lambda f: (f["A.x"] < -2.5) | ((f["A.x"] >= 1) & (f["A.x"] < 3.5)) | (f["A.x"] == 0),
         ["A.x", "A.k"], rows=400),
    Case("not-range", "SELECT A.k FROM A WHERE NOT (A.a BETWEEN 1 AND 3) AND NOT A.b IN (0, 2) "
         "WINDOW [1]",
         lambda f: ~((f["A.a"] >= 1) & (f["A.a"] <= 3)) & ~f["A.b"].isin([0, 2]),
         ["A.k"], rows=400),
    Case("theta-and-equi", "SELECT A.k, B.k FROM A, B WHERE A.a < B.a AND A.b = B.b AND B.x > 0 "
         "WINDOW [1]",
         lambda f: (f["A.a"] < f["B.a"]) & (f["A.b"] == f["B.b"]) & (f["B.x"] > 0),
         ["A.k", "B.k"], rows=150, selections={"B": lambda w: w["x"] > 0}),
    Case("theta-only", "SELECT A.k, B.c FROM A, B WHERE A.a > B.b WINDOW [1]",
         lambda f: f["A.a"] > f["B.b"], ["A.k", "B.c"], rows=80),
    Case("theta-three-streams", "SELECT A.k, B.k, C.k FROM A, B, C "
         "WHERE A.a = B.a AND (A.b = C.b OR B.c < C.c) WINDOW [1]",
         lambda f: (f["A.a"] == f["B.a"]) & ((f["A.b"] == f["C.b"]) | (f["B.c"] < f["C.c"])),
         ["A.k", "B.k", "C.k"], rows=40),
    Case("aggregate-group-having",
         "SELECT A.k, COUNT(*) AS n, SUM(B.b), AVG(B.x), MIN(A.a), MAX(B.a) FROM A, B "
         "WHERE A.a = B.a AND A.b > 1 GROUP BY A.k HAVING COUNT(*) > 190 AND SUM(B.c) >= 520 "
         "WINDOW [1]",
         lambda f: (f["A.a"] == f["B.a"]) & (f["A.b"] > 1), _agg_group_having, rows=150),
    Case("aggregate-over-chain", "SELECT B.k, MIN(B.k), COUNT(A.k) FROM A, B, C "
         "WHERE A.b = B.a AND B.b = C.a GROUP BY B.k WINDOW [1]",
         lambda f: (f["A.b"] == f["B.a"]) & (f["B.b"] == f["C.a"]), _agg_chain, rows=40),
    Case("aggregate-empty-window", "SELECT COUNT(*), SUM(A.a), MAX(A.x) FROM A WHERE A.k > 100 "
         "WINDOW [1]",
         lambda f: f["A.k"] > 100, _agg_empty, rows=100),
    Case("count-star", "SELECT COUNT(*) FROM A WHERE A.k >= 5 WINDOW [1]",
         lambda f: f["A.k"] >= 5, lambda f: [(len(f),)], rows=300),
    Case("residual-multi-column", "SELECT A.k, A.c FROM A "
         "WHERE A.a < A.b AND (A.c = 1 OR A.k > 5) AND A.a >= 1 WINDOW [1]",
         lambda f: (f["A.a"] < f["A.b"]) & ((f["A.c"] == 1) | (f["A.k"] > 5)) & (f["A.a"] >= 1),
         ["A.k", "A.c"], rows=400),
    Case("closure-implied-selection", "SELECT A.k, B.k FROM A, B WHERE A.a = B.a AND A.b = B.a "
         "WINDOW [1]",
         lambda f: (f["A.a"] == f["B.a"]) & (f["A.b"] == f["B.a"]), ["A.k", "B.k"], rows=150,
         selections={"A": lambda w: w["a"] == w["b"]}),
    Case("cartesian", "SELECT A.k, B.k FROM A, B WHERE A.a > 5 WINDOW [1]",
         lambda f: f["A.a"] > 5, ["A.k", "B.k"], rows=60,
         selections={"A": lambda w: w["a"] > 5}),
    Case("repeated-output-column", "SELECT A.a, A.a AS again, A.k FROM A WHERE A.k = 1 WINDOW [1]",
         lambda f: f["A.k"] == 1, ["A.a", "A.a", "A.k"], rows=300),
    Case("no-predicate", "SELECT A.tag, A.x FROM A WINDOW [1]", None, ["A.tag", "A.x"], rows=100),
    # the grouped selection is FALSE: select_mask evaluates its one condition
    Case("contradiction", "SELECT A.k, A.a FROM A WHERE A.a > 5 AND A.a < 3 AND A.k = 1 "
         "WINDOW [1]",
         lambda f: f["A.a"] != f["A.a"], ["A.k", "A.a"], rows=100,
         selections={"A": lambda w: w["a"] != w["a"]}),
    # HAVING with BETWEEN and IN over aggregates, and a repeated GROUP BY column
    Case("having-between-in", "SELECT A.k, COUNT(*), MAX(A.tag) FROM A GROUP BY A.k, A.k "
         "HAVING COUNT(*) BETWEEN 30 AND 36 AND NOT COUNT(*) IN (31) OR A.k IN (9) WINDOW [1]",
         None, _agg_having_between_in, rows=300),
]


def windows_for(case: Case) -> dict[str, pd.DataFrame]:
    return dec_windows(case.rows) if case.catalog == "dec" else abcd_windows(case.rows)


def direct(query, windows, case: Case) -> tuple[pd.DataFrame, int]:
    """The expected result, and the number of rows of the filtered cross product."""
    frames = [windows[s].add_prefix(f"{s}.") for s in query.stream_names]
    cross = functools.reduce(lambda left, right: left.merge(right, how="cross"), frames)
    filtered = cross[case.where(cross)] if case.where is not None else cross
    if callable(case.output):
        expected = pd.DataFrame(case.output(filtered), columns=range(len(query.projection)))
    else:
        expected = pd.DataFrame({i: filtered[c].to_numpy() for i, c in enumerate(case.output)})
    return expected, len(filtered)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_every_plan_matches_direct_evaluation(case):
    query = parse_query(case.sql, DEC if case.catalog == "dec" else ABCD)
    windows = windows_for(case)
    expected, matches = direct(query, windows, case)
    plans = enumerate_plans(query)
    assert plans
    want = multiset(expected)
    for plan in plans:
        run = execute(plan, query, windows)
        assert list(run.result.columns) == [c.name for c in query.projection]
        assert multiset(run.result) == want, plan.id
        check_counts(plan, run, windows, query, case, matches)


def check_counts(plan, run, windows, query, case: Case, matches: int) -> None:
    """Per-operator counts: reads are the inputs' emissions, and what is known exactly."""
    assert list(run.operators) == list(plan.operators())
    for key in plan.operators():
        node, counts = node_attributes(plan.node(key)), run.operators[key]
        fed = tuple(run.operators[k].emitted for k in node["inputs"])
        assert counts.inputs == fed
        kind = node["kind"]
        if kind == "source":
            assert counts.read == counts.emitted == counts.held == len(windows[node["stream"]])
            continue
        assert counts.read == sum(fed) and counts.held == sum(fed)
        if kind == "projection":
            assert counts.emitted == counts.read
        if kind == "selection":
            stream = node["stream"]
            if len(query.streams) == 1:
                assert counts.emitted == matches
            if stream in case.selections:
                window = windows[stream]
                assert counts.emitted == int(case.selections[stream](window).sum())
        if kind == "join":
            assert len(fed) == 2
    # the last operator below the aggregate and the final projection sees every match
    below = [k for k in plan.operators() if k not in ("agg", "proj:out")][-1]
    assert run.operators[below].emitted == matches
    assert run.operators[plan.root].emitted == len(run.result)


def test_selection_counts_agree_across_plans():
    case = next(c for c in CASES if c.name == "chain-4")
    query = parse_query(case.sql, ABCD)
    windows = windows_for(case)
    emitted = {(k, execute(p, query, windows).operators[k].emitted)
               for p in enumerate_plans(query) for k in p.operators()
               if p.node(k).kind in ("selection", "source")}
    assert len({k for k, _ in emitted}) == len(emitted)  # one count per operator key


def test_multiset_canonical_form():
    frame = pd.DataFrame({"a": [1, 1, 2], "b": [0.1 + 0.2, 0.3, np.nan], "c": ["x", "x", "y"]})
    assert multiset(frame) == {(1, 0.3, "x"): 2, (2, None, "y"): 1}
    assert multiset(pd.DataFrame({"a": np.array([3.0])})) == {(3,): 1}


def test_select_mask_is_the_selection_condition():
    frame = abcd_windows(20)["A"].add_prefix("A.")
    q = parse_query("SELECT A.k FROM A WHERE A.a > 5 AND A.a < 3 WINDOW [1]", ABCD)  # FALSE
    mask = select_mask(q.selections["A"], frame)
    assert mask.dtype == bool and mask.index.equals(frame.index) and not mask.any()
    q = parse_query("SELECT A.k FROM A WHERE A.a BETWEEN 1 AND 3 AND NOT A.b IN (0, 2) "
                    "AND A.tag <> 'x' AND A.a < A.c WINDOW [1]", ABCD)
    want = (frame["A.a"].between(1, 3) & ~frame["A.b"].isin([0, 2])
            & (frame["A.tag"] != "x") & (frame["A.a"] < frame["A.c"]))
    assert select_mask(q.selections["A"], frame).equals(want)


def test_missing_window_is_reported():
    query = parse_query("SELECT A.k FROM A, B WHERE A.k = B.k WINDOW [1]", ABCD)
    with pytest.raises(KeyError, match="no window given for stream B"):
        execute(enumerate_plans(query)[0], query, {"A": abcd_windows(5)["A"]})


# -- random single-stream selections ---------------------------------------------
WINDOW = abcd_windows(200, seed=3)["A"]
PREFIXED = WINDOW.add_prefix("A.")
INT_COLUMNS = ["k", "a", "b", "c"]


def _atoms():
    col = st.sampled_from(INT_COLUMNS)
    value = st.integers(-1, 10)
    ops = {"=": np.equal, "<>": np.not_equal, "<": np.less, "<=": np.less_equal,
           ">": np.greater, ">=": np.greater_equal}
    compare = st.builds(lambda c, op, v: (f"A.{c} {op} {v}", lambda f: ops[op](f[f"A.{c}"], v)),
                        col, st.sampled_from(list(ops)), value)
    between = st.builds(lambda c, lo, hi: (f"A.{c} BETWEEN {lo} AND {hi}",
                                           lambda f: (f[f"A.{c}"] >= lo) & (f[f"A.{c}"] <= hi)),
                        col, value, value)
    in_list = st.builds(lambda c, vs: (f"A.{c} IN ({', '.join(map(str, vs))})",
                                       lambda f: f[f"A.{c}"].isin(vs)),
                        col, st.lists(value, min_size=1, max_size=4))
    two_columns = st.builds(lambda c, op, d: (f"A.{c} {op} A.{d}",
                                              lambda f: ops[op](f[f"A.{c}"], f[f"A.{d}"])),
                            col, st.sampled_from(list(ops)), col).filter(
                                lambda t: t[0].split()[0] != t[0].split()[2])
    return st.one_of(compare, between, in_list, two_columns)


def _combine(children):
    both = st.tuples(children, children)
    return st.one_of(
        st.builds(lambda p: (f"({p[0][0]} AND {p[1][0]})",
                             lambda f: p[0][1](f) & p[1][1](f)), both),
        st.builds(lambda p: (f"({p[0][0]} OR {p[1][0]})",
                             lambda f: p[0][1](f) | p[1][1](f)), both),
        st.builds(lambda p: (f"NOT ({p[0]})", lambda f: ~p[1](f)), children),
    )


PREDICATES = st.recursive(_atoms(), _combine, max_leaves=5)


@settings(max_examples=60, deadline=None)
@given(PREDICATES, st.sampled_from(["A.k, A.x", "A.a", "*", "COUNT(*)"]))
def test_random_selections(predicate, select):
    sql, mask = predicate
    query = parse_query(f"SELECT {select} FROM A WHERE {sql} WINDOW [1]", ABCD)
    passing = PREFIXED[np.asarray(mask(PREFIXED), dtype=bool)]
    if select == "COUNT(*)":
        expected = pd.DataFrame({0: [len(passing)]})
    else:
        columns = [f"A.{c}" for c in WINDOW.columns] if select == "*" else select.split(", ")
        expected = pd.DataFrame({i: passing[c].to_numpy() for i, c in enumerate(columns)})
    for plan in enumerate_plans(query):
        run = execute(plan, query, {"A": WINDOW})
        assert multiset(run.result) == multiset(expected), (sql, plan.id)


# -- the statistics of many rounds at once --------------------------------------------
ROUND_QUERIES = {
    "selections and an equi-join": "SELECT A.k, B.k FROM A, B WHERE A.b = B.b AND A.k < 5 "
                                   "AND B.x > 0 WINDOW [1]",
    "theta and equi": "SELECT A.k, B.k FROM A, B WHERE A.a < B.a AND A.b = B.b WINDOW [1]",
    "theta only": "SELECT A.k, B.c FROM A, B WHERE A.a > B.b WINDOW [1]",
    "two keys, three streams": "SELECT A.k FROM A, B, C WHERE A.a = B.a AND A.b = B.b "
                               "AND B.c = C.c AND C.tag IN ('x', 'zz') WINDOW [1]",
}


@pytest.mark.parametrize("name", ROUND_QUERIES)
@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), n_rounds=st.integers(1, 6), rows=st.integers(0, 40))
def test_round_statistics_of_many_rounds_are_each_round_alone(name, seed, n_rounds, rows):
    """What the driver computes for a backlog in one pass (every round a key) is, round by
    round, what :func:`window_statistics` gives that round's windows alone: NaN where a
    round has no tuple or no pair, rounds without tuples included."""
    from cqopt.costmodel.validation import round_statistics, window_statistics

    query = parse_query(ROUND_QUERIES[name], ABCD)
    rng = np.random.default_rng(seed)
    windows = {s: w.iloc[:rng.integers(0, rows + 1)].reset_index(drop=True)
               for s, w in abcd_windows(rows, seed).items()
               if s in {ref.name for ref in query.streams}}
    # Rounds skip some values, so some rounds of a stream (or of all) hold no tuple.
    rounds = {s: rng.choice(np.arange(n_rounds)[::2] if n_rounds > 2 else n_rounds, len(w))
              for s, w in windows.items()}
    together = round_statistics(query, windows, rounds, n_rounds, 1.0)
    for r in range(n_rounds):
        alone = window_statistics(query, {s: w[rounds[s] == r] for s, w in windows.items()},
                                  1.0)
        for stat, value in alone.items():
            got = together[stat][r]
            assert (np.isnan(value) and np.isnan(got)) or got == value, (stat, r, got, value)


_KEYS = st.one_of(st.integers(0, 4).map(float), st.just(float("nan")))


@settings(max_examples=150, deadline=None)
@given(st.integers(1, 2), st.lists(st.tuples(st.integers(0, 3), _KEYS, _KEYS), max_size=30),
       st.lists(st.tuples(st.integers(0, 3), _KEYS, _KEYS), max_size=30))
def test_join_sizes_count_what_join_builds_per_group(keys, left_rows, right_rows):
    """Counted by codes, each group's pairs are the rows the reference join builds from
    that group's rows alone, NaN keys matching each other as in pd.merge."""
    from cqopt.costmodel.reference_executor import join, join_sizes
    from cqopt.optimizer.query.join_closure import JoinPredicate

    def frame(rows, stream):
        return pd.DataFrame({f"{stream}.x": [r[1] for r in rows],
                             f"{stream}.y": [r[2] for r in rows]}, dtype=np.float64)

    left, right = frame(left_rows, "A"), frame(right_rows, "B")
    groups = (np.array([r[0] for r in left_rows], np.int64),
              np.array([r[0] for r in right_rows], np.int64))
    on = tuple(JoinPredicate(("A", c), ("B", c)) for c in "xy"[:keys])
    want = [len(join(left[groups[0] == g].reset_index(drop=True),
                     right[groups[1] == g].reset_index(drop=True), on)) for g in range(4)]
    assert join_sizes(left, right, on, groups, 4).tolist() == want
