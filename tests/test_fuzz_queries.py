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
    from cqopt.optimizer.logical import parse_query

    values = list(range(0, 20000, 2))
    sql = (f"SELECT * FROM TCP WHERE TCP.dest_host IN ({', '.join(map(str, values))}) "
           f"AND TCP.dest_host NOT IN ({', '.join(map(str, range(0, 20000, 4)))}) WINDOW [1]")
    selection = parse_query(sql, dec_catalog).selections["TCP"]
    assert selection.columns["dest_host"].points == tuple(range(2, 20000, 4))
    assert selection.rate_class == "selection-equality"


def _intervals():
    from cqopt.optimizer.intervals import Interval, IntervalSet

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
    from cqopt.optimizer.intervals import IntervalSet

    return IntervalSet.of(s.intervals)
