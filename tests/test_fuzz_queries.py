"""The query front end under attack: every mutated query ends in a result or one
line of CqoptError, within a time budget (scripts/fuzz_queries.py runs the same
cases at scale)."""

from __future__ import annotations

import importlib.util
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st


@pytest.fixture(scope="module")
def fuzz(repo_root):
    spec = importlib.util.spec_from_file_location("fuzz_queries",
                                                  repo_root / "scripts" / "fuzz_queries.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# Generous against a loaded machine; a quadratic IN list of 2,000 values took minutes.
BUDGET_S = 10.0


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(seed=st.integers(0, 2**32 - 1), base=st.integers(0, 4))
def test_a_mutated_query_ends_in_a_result_or_one_line_error(fuzz, dec_catalog, seed, base):
    rng = random.Random(seed)
    sql = fuzz.mutate(rng, fuzz.SEEDS[base], max_in=2000)
    result, detail = fuzz.outcome(sql, dec_catalog, BUDGET_S)
    assert result in ("ok", "error"), f"{result} for {sql[:200]!r}:\n{detail}"


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(text=st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=0x2FF),
                    max_size=12))
def test_any_string_literal_is_a_result_or_an_escaped_one_line_error(fuzz, dec_catalog, text):
    quoted = text.replace("'", "''")
    sql = f"SELECT TCP.src_host FROM TCP WHERE TCP.dest_host = '{quoted}' WINDOW [1]"
    result, detail = fuzz.outcome(sql, dec_catalog, BUDGET_S)
    assert result in ("ok", "error"), detail
    assert "\x1b" not in detail and "\n" not in detail


@pytest.mark.parametrize("literal", ["9" * 5000, "1e999", "-1e-400", "0x" + "f" * 50])
def test_hostile_literals(fuzz, dec_catalog, literal):
    sql = f"SELECT * FROM TCP WHERE TCP.bytes = {literal} WINDOW [1]"
    assert fuzz.outcome(sql, dec_catalog, BUDGET_S)[0] in ("ok", "error")


def test_a_long_in_list_groups_into_one_selection(dec_catalog):
    from cqopt.optimizer.query.logical import parse_query

    values = list(range(0, 20000, 2))
    sql = (f"SELECT * FROM TCP WHERE TCP.dest_host IN ({', '.join(map(str, values))}) "
           f"AND TCP.dest_host NOT IN ({', '.join(map(str, range(0, 20000, 4)))}) WINDOW [1]")
    selection = parse_query(sql, dec_catalog).selections["TCP"]
    assert selection.columns["dest_host"].points == tuple(range(2, 20000, 4))
    assert selection.rate_class == "selection-equality"


def _intervals():
    from cqopt.optimizer.query.intervals import Interval, IntervalSet

    bound = st.one_of(st.none(), st.integers(0, 6))
    interval = st.builds(Interval, bound, bound, st.booleans(), st.booleans())
    return st.lists(interval, max_size=5).map(IntervalSet.of)


@settings(max_examples=300, deadline=None)
@given(a=_intervals(), b=_intervals(), probe=st.integers(-1, 7))
def test_intersection_sweep_agrees_with_membership(a, b, probe):
    both = a & b
    for x in (probe, probe + 0.5):
        assert both.contains(x) == (a.contains(x) and b.contains(x))
    assert both == IntervalSetOf(both)


def IntervalSetOf(s):  # normal form is a fixed point
    from cqopt.optimizer.query.intervals import IntervalSet

    return IntervalSet.of(s.intervals)


# -- bounds before parsing: join chains, long IN lists, deep nesting, long texts -------
def test_a_chain_of_joins_without_on_is_read_in_one_pass(monkeypatch):
    from cqopt.optimizer.query import dialect

    calls = []
    original = dialect.CQLParser._parse_join
    monkeypatch.setattr(dialect.CQLParser, "_parse_join",
                        lambda self, *a, **k: calls.append(1) or original(self, *a, **k))
    for n in (4, 12, 24):
        calls.clear()
        select = dialect.parse("SELECT TCP.src_host FROM TCP" + " JOIN UDP" * n + " WINDOW [1]")
        assert len(select.args["joins"]) == n
        # one call per join and one that finds none; sqlglot's nested-join retry made 2^n
        assert len(calls) <= 2 * (n + 1), (n, len(calls))


@pytest.mark.parametrize("sql, limit", [
    ("SELECT TCP.src_host FROM TCP WHERE TCP.dest_host = 1 " + " " * 250_000 + "WINDOW [1]",
     "at most 250,000"),
    ("SELECT TCP.src_host FROM TCP" + " JOIN UDP" * 40 + " WINDOW [1]", "at most 32"),
    ("SELECT TCP.src_host FROM TCP" + ", UDP" * 40 + " WINDOW [1]", "at most 32"),
    ("SELECT * FROM TCP JOIN UDP ON TCP.a = UDP.a" + ", SF" * 40 + " WINDOW [1]", "at most 32"),
    ("SELECT TCP.src_host FROM TCP WHERE TCP.dest_host IN (" + ", ".join(map(str, range(10_001)))
     + ") WINDOW [1]", "at most 10,000"),
    ("SELECT TCP.src_host FROM TCP WHERE " + "(" * 33 + "TCP.dest_host = 1" + ")" * 33
     + " WINDOW [1]", "at most 32 levels"),
])
def test_a_query_beyond_a_bound_is_refused_before_parsing_and_names_it(sql, limit):
    from cqopt.optimizer.query.dialect import parse
    from cqopt.optimizer.query.errors import CQLSyntaxError

    with pytest.raises(CQLSyntaxError, match=limit) as info:
        parse(sql)
    assert len(str(info.value)) < 300


def test_a_query_at_the_bounds_parses():
    from cqopt.optimizer.query.dialect import MAX_IN_VALUES, MAX_NESTING, MAX_STREAMS, parse

    values = ", ".join(map(str, range(MAX_IN_VALUES)))
    deep = MAX_NESTING - 1  # and the IN list's own parenthesis
    select = parse("SELECT TCP.src_host FROM TCP" + " JOIN UDP" * (MAX_STREAMS - 1)
                   + f" WHERE {'(' * deep}TCP.dest_host IN (1, 2){')' * deep}"
                   f" AND TCP.src_host IN ({values}) WINDOW [1]")
    assert len(select.args["joins"]) == MAX_STREAMS - 1


_STREAMS = ("TCP", "UDP", "SF")


@st.composite
def join_chains(draw):
    """A FROM list of up to 40 items: JOIN with or without ON, commas, aliases, nesting."""
    n = draw(st.integers(1, 40))
    parts = ["SELECT * FROM TCP AS s0"]
    for i in range(1, n):
        stream = draw(st.sampled_from(_STREAMS))
        how = draw(st.sampled_from(("JOIN", ",", "CROSS JOIN", "INNER JOIN", "LEFT JOIN")))
        on = draw(st.sampled_from(("", f" ON s{i - 1}.src_host = s{i}.src_host",
                                   f" ON s0.src_host = s{i}.dest_host ON s0.a = s1.a")))
        parts.append(f"{how} {stream} AS s{i}{on if how != ',' else ''}")
    tail = draw(st.sampled_from((" WINDOW [1]", " WHERE s0.src_host = 1 WINDOW [1]", "")))
    return " ".join(parts) + tail


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(sql=join_chains())
def test_a_join_chain_ends_in_a_result_or_one_line_error(fuzz, dec_catalog, sql):
    result, detail = fuzz.outcome(sql, dec_catalog, BUDGET_S)
    assert result in ("ok", "error"), f"{result} for {sql[:200]!r}:\n{detail}"
