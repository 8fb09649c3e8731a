"""The user's contract, third audit (continued): stray CQL tokens and absurd windows refused,
fidelity's options and trailing tuples said out loud, a refused round kept in the schedule."""

from __future__ import annotations

import pytest

from cqopt.optimizer.query.dialect import parse
from cqopt.optimizer.query.errors import CQLSyntaxError, UnsupportedQueryError
from cqopt.optimizer.query.logical import parse_query


# -- CQL: stray tokens are an error where they stand ----------------------------------------
@pytest.mark.parametrize("sql, col, near", [
    ("SELECT * FROM TCP JOIN UDP [NOW] ? ON TCP.src_host = UDP.src_host", 34, "?"),
    ("SELECT * FROM TCP [NOW] ? WHERE TCP.src_host = 1", 25, "?"),
    ("SELECT TCP.src_host, , TCP.dest_host FROM TCP", 22, ","),
    ("SELECT TCP.src_host, FROM TCP", 22, "FROM"),
    ("SELECT * FROM TCP WHERE TCP.src_host IN (1, 2,, 3)", 47, ","),
    ("SELECT * FROM TCP WHERE TCP.src_host IN ( ,5)", 43, ","),
    ("SELECT * FROM TCP GROUP BY TCP.src_host, , TCP.dest_host", 42, ","),
    ("SELECT * FROM TCP * WHERE TCP.src_host = 1", 19, "*"),
    ("SELECT * ts FROM TCP", 10, "ts"),
    ("SELECT TCP.* AS t FROM TCP", 17, "t"),
    ("SELECT COUNT() FROM TCP", 14, ")"),
])
def test_a_stray_token_is_refused_at_its_position(sql, col, near):
    with pytest.raises(CQLSyntaxError) as info:
        parse(sql)
    error = info.value
    assert (error.line, error.col, error.token) == (1, col, near), str(error)
    assert "\n" not in str(error)


@pytest.mark.parametrize("sql, bound", [
    ("SELECT * FROM TCP [RANGE 1e297 SECONDS]", "1 year"),
    ("SELECT * FROM TCP [RANGE 18446744073709551616 SECONDS]", "1 year"),
    ("SELECT * FROM TCP [RANGE 8785 HOURS]", "1 year"),
    ("SELECT * FROM TCP WINDOW [1e-31]", "1 MILLISECONDS"),
    ("SELECT * FROM TCP [RANGE 0.5 MILLISECONDS]", "1 MILLISECONDS"),
    ("SELECT * FROM TCP [ROWS 9999999999999999999] WINDOW [1]", "2^31"),
    ("SELECT * FROM TCP [ROWS 2147483649] WINDOW [1]", "2^31"),
])
def test_an_absurd_window_is_refused_with_its_bound(dec_catalog, sql, bound):
    with pytest.raises((UnsupportedQueryError, CQLSyntaxError), match=bound.replace("^", r"\^")):
        parse_query(sql, dec_catalog)


@pytest.mark.parametrize("sql", [
    "SELECT * FROM TCP [RANGE 1 MILLISECONDS]", "SELECT * FROM TCP [RANGE 8760 HOURS]",
    "SELECT * FROM TCP [ROWS 2147483648] WINDOW [1]", "SELECT COUNT(*) FROM TCP WINDOW [1]",
    "SELECT TCP.src_host AS h, COUNT(TCP.bytes) FROM TCP GROUP BY TCP.src_host WINDOW [1]",
])
def test_the_windows_and_lists_at_the_bounds_still_parse(dec_catalog, sql):
    parse_query(sql, dec_catalog)
