"""Tests for the CQL sqlglot dialect (optimizer/query/dialect.py)."""

from __future__ import annotations

import pickle

import pytest
import sqlglot
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlglot import exp

from cqopt.optimizer.query.dialect import (
    CQL,
    StreamWindow,
    parse,
    query_window,
    table_window,
    window_seconds,
)
from cqopt.optimizer.query.errors import CQLSyntaxError

# The OM paper's queries
Q1 = "SELECT TCP.src_host, TCP.dest_host FROM TCP WHERE TCP.dest_host=2 WINDOW [1]"
Q2 = (
    "SELECT * FROM TCP, UDP, SF WHERE TCP.src_host=UDP.dest_host "
    "and UDP.dest_host=SF.dest_host WINDOW [1]"
)

# STREAM paper (CQL) and RTStream examples
STREAM_JOIN = "SELECT * FROM S1 [ROWS 1000], S2 [RANGE 2 MINUTES] WHERE S1.A = S2.A AND S1.A > 10"
STREAM_COUNT = "SELECT COUNT(*) FROM S [RANGE 30 SECONDS] WHERE S.a > 5"
STREAM_PARTITION = "SELECT S.a, MAX(S.b) FROM S [PARTITION BY S.a ROWS 10] GROUP BY S.a"
RTSTREAM = "SELECT S0.a FROM S0 [range 4 second] WHERE S0.a > 10"

VALID = [
    Q1,
    Q2,
    STREAM_JOIN,
    STREAM_COUNT,
    STREAM_PARTITION,
    RTSTREAM,
    "SELECT * FROM S [RANGE 15 MINUTES PRECEDING]",
    "SELECT * FROM S [ROWS 100]",
    "SELECT * FROM S [ROWS 10 PRECEDING]",
    "SELECT * FROM S [PARTITION BY S.a, S.b ROWS 5 PRECEDING]",
    "SELECT * FROM S [NOW]",
    "SELECT * FROM S [UNBOUNDED]",
    "SELECT t.a FROM TCP [RANGE 1 SECOND] AS t",
    "SELECT t.a FROM TCP AS t [RANGE 1 SECOND]",
    "SELECT t.a FROM TCP t [RANGE 1 SECOND]",
    "SELECT a FROM TCP WHERE a = 1 WINDOW [500 MILLISECONDS]",
    "SELECT a FROM TCP WINDOW [2 minute]",
    "SELECT a FROM TCP WINDOW [1.5 Hours]",
    "SELECT a FROM TCP WHERE a BETWEEN 1 AND 3 OR NOT (b IN (1, 2) AND c <> 4) AND d != 5",
    "SELECT a AS x, b FROM S [RANGE 10 SECONDS] WHERE a < 1 AND b <= 2 AND c > 3 AND d >= 4",
    "SELECT s.a, t.b FROM S [ROWS 10] AS s JOIN T [RANGE 2 SECONDS] AS t ON s.a = t.b "
    "WHERE s.c = 1",
    "SELECT s.a FROM S AS s INNER JOIN T AS t ON s.a = t.a WINDOW [3]",
    "SELECT a, COUNT(*), SUM(b), AVG(b), MIN(b), MAX(b) FROM S [RANGE 1 MINUTE] "
    "GROUP BY a HAVING COUNT(*) > 2 WINDOW [10 SECONDS]",
]


def windows(select: exp.Select) -> dict[str, StreamWindow | None]:
    return {table.name: table_window(table) for table in select.find_all(exp.Table)}


@pytest.mark.parametrize("sql", VALID)
def test_valid_queries_parse_and_round_trip(sql: str) -> None:
    select = parse(sql)
    assert isinstance(select, exp.Select)
    assert parse(select.sql(dialect=CQL)) == select
    assert parse(select.sql(dialect=CQL, pretty=True)) == select


@pytest.mark.parametrize("sql", VALID)
def test_tree_copies_hashes_walks_and_pickles(sql: str) -> None:
    select = parse(sql)
    assert select.copy() == select and hash(select.copy()) == hash(select)
    assert pickle.loads(pickle.dumps(select)) == select
    assert all(node is not None for node in select.walk())
    repr(select)
    # sqlglot's own entry points find the dialect by name
    assert sqlglot.parse_one(sql, read="cql") == select


def test_om_q1() -> None:
    select = parse(Q1)
    assert [c.sql() for c in select.expressions] == ["TCP.src_host", "TCP.dest_host"]
    assert windows(select) == {"TCP": None}
    window = query_window(select)
    assert window.kind == "range" and window.size == exp.Literal.number(1)
    assert window.unit == "SECONDS" and window_seconds(window) == 1.0
    assert select.sql(dialect=CQL).endswith("WINDOW [1 SECONDS]")
    where = select.args["where"].this
    assert isinstance(where, exp.EQ) and where.expression == exp.Literal.number(2)


def test_om_q2() -> None:
    select = parse(Q2)
    assert isinstance(select.expressions[0], exp.Star)
    assert list(windows(select)) == ["TCP", "UDP", "SF"]
    assert window_seconds(query_window(select)) == 1.0
    assert isinstance(select.args["where"].this, exp.And)
    assert {c.sql() for c in select.find_all(exp.Column)} == {
        "TCP.src_host",
        "UDP.dest_host",
        "SF.dest_host",
    }


def test_stream_join() -> None:
    select = parse(STREAM_JOIN)
    s1, s2 = windows(select).values()
    assert (s1.kind, s1.size.this, s1.unit, window_seconds(s1)) == ("rows", "1000", None, None)
    assert (s2.kind, s2.size.this, s2.unit, window_seconds(s2)) == ("range", "2", "MINUTES", 120.0)
    assert query_window(select) is None


def test_stream_count() -> None:
    select = parse(STREAM_COUNT)
    assert isinstance(select.expressions[0], exp.Count)
    assert window_seconds(windows(select)["S"]) == 30.0


def test_stream_partition() -> None:
    select = parse(STREAM_PARTITION)
    window = windows(select)["S"]
    assert window.kind == "rows" and window.size.this == "10"
    assert [c.sql() for c in window.partition_by] == ["S.a"]
    assert all(isinstance(c, exp.Column) for c in window.partition_by)
    assert select.args["group"].expressions[0].sql() == "S.a"
    assert isinstance(select.expressions[1], exp.Max)


def test_rtstream_lowercase() -> None:
    window = windows(parse(RTSTREAM))["S0"]
    assert (window.kind, window.unit, window_seconds(window)) == ("range", "SECONDS", 4.0)


@pytest.mark.parametrize(
    "clause, kind, size, unit, seconds, preceding",
    [
        ("[RANGE 10 SECONDS]", "range", "10", "SECONDS", 10.0, False),
        ("[RANGE 10]", "range", "10", "SECONDS", 10.0, False),
        ("[RANGE 15 MINUTES PRECEDING]", "range", "15", "MINUTES", 900.0, True),
        ("[RANGE 2 hour]", "range", "2", "HOURS", 7200.0, False),
        ("[Range 250 Millisecond]", "range", "250", "MILLISECONDS", 0.25, False),
        ("[RANGE 1.5 SECONDS]", "range", "1.5", "SECONDS", 1.5, False),
        ("[ROWS 100]", "rows", "100", None, None, False),
        ("[rows 10 preceding]", "rows", "10", None, None, True),
        ("[NOW]", "now", None, None, None, False),
        ("[UNBOUNDED]", "unbounded", None, None, None, False),
        ("[RANGE UNBOUNDED]", "unbounded", None, None, None, False),
    ],
)
def test_table_window_forms(clause, kind, size, unit, seconds, preceding) -> None:
    select = parse(f"SELECT * FROM S {clause} WHERE S.a > 1")
    window = table_window(select.find(exp.Table))
    assert isinstance(window, StreamWindow)
    assert window.kind == kind
    assert (window.size.this if window.size else None) == size
    assert window.unit == unit
    assert window_seconds(window) == seconds
    assert window.preceding is preceding
    assert window.partition_by == []
    assert parse(select.sql(dialect=CQL)) == select


def test_partition_by_several_columns() -> None:
    select = parse("SELECT * FROM S [PARTITION BY S.a, b ROWS 3]")
    window = table_window(select.find(exp.Table))
    assert [c.sql() for c in window.partition_by] == ["S.a", "b"]
    # partition columns are ordinary columns of the tree
    assert {c.sql() for c in select.find_all(exp.Column)} == {"S.a", "b"}
    assert select.sql(dialect=CQL) == "SELECT * FROM S [PARTITION BY S.a, b ROWS 3]"


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT t.a FROM TCP [RANGE 1 SECOND] AS t",
        "SELECT t.a FROM TCP AS t [RANGE 1 SECOND]",
        "SELECT t.a FROM TCP t [RANGE 1 SECOND]",
        "SELECT t.a FROM TCP [RANGE 1 SECOND] t",
    ],
)
def test_alias_before_or_after_window(sql: str) -> None:
    select = parse(sql)
    table = select.find(exp.Table)
    assert (table.name, table.alias) == ("TCP", "t")
    assert window_seconds(table_window(table)) == 1.0
    assert select.sql(dialect=CQL) == "SELECT t.a FROM TCP [RANGE 1 SECONDS] AS t"


def test_window_is_not_an_array_subscript() -> None:
    select = parse("SELECT * FROM TCP [ROWS 1] WINDOW [1]")
    assert select.find(exp.Bracket) is None
    assert isinstance(select.args["from_"].this, exp.Table)


@pytest.mark.parametrize(
    "clause, unit, seconds",
    [
        ("[1]", "SECONDS", 1.0),
        ("[500 MILLISECONDS]", "MILLISECONDS", 0.5),
        ("[2 minute]", "MINUTES", 120.0),
        ("[1 HOUR]", "HOURS", 3600.0),
        ("[0.5 seconds]", "SECONDS", 0.5),
    ],
)
def test_query_window(clause: str, unit: str, seconds: float) -> None:
    select = parse(f"SELECT a FROM S WHERE a = 2 GROUP BY a HAVING COUNT(*) > 1 WINDOW {clause}")
    window = query_window(select)
    assert (window.kind, window.unit, window_seconds(window)) == ("range", unit, seconds)
    assert table_window(select.find(exp.Table)) is None
    assert select.args.get("windows") is None
    assert parse(select.sql(dialect=CQL)) == select


def test_query_and_table_windows_together() -> None:
    select = parse("SELECT * FROM S [ROWS 5], T WHERE S.a = T.a WINDOW [2 SECONDS]")
    assert windows(select)["S"].kind == "rows" and windows(select)["T"] is None
    assert window_seconds(query_window(select)) == 2.0


def test_named_sql_windows_still_parse() -> None:
    select = parse("SELECT SUM(a) OVER w FROM S WINDOW w AS (PARTITION BY b)")
    assert query_window(select) is None
    assert len(select.args["windows"]) == 1


def test_windows_survive_copy_and_equality() -> None:
    a = parse(STREAM_JOIN)
    b = a.copy()
    assert a == b
    assert table_window(b.find(exp.Table)).kind == "rows"
    assert parse("SELECT * FROM S [ROWS 10]") != parse("SELECT * FROM S [RANGE 10]")
    assert parse("SELECT * FROM S [RANGE 10]") != parse("SELECT * FROM S [RANGE 10 MINUTES]")
    assert parse("SELECT * FROM S") != parse("SELECT * FROM S [UNBOUNDED]")
    assert parse("SELECT * FROM S WINDOW [1]") != parse("SELECT * FROM S WINDOW [2]")


def test_generated_sql() -> None:
    assert parse(STREAM_JOIN).sql(dialect=CQL) == (
        "SELECT * FROM S1 [ROWS 1000], S2 [RANGE 2 MINUTES] WHERE S1.A = S2.A AND S1.A > 10"
    )
    assert parse(RTSTREAM).sql(dialect=CQL) == (
        "SELECT S0.a FROM S0 [RANGE 4 SECONDS] WHERE S0.a > 10"
    )
    assert parse("SELECT * FROM S [rows 3 preceding] WINDOW [5]").sql(dialect=CQL) == (
        "SELECT * FROM S [ROWS 3 PRECEDING] WINDOW [5 SECONDS]"
    )


@pytest.mark.parametrize(
    "sql, token",
    [
        ("SELECT FROM WHERE", "FROM"),
        ("SELECT FROM S", "FROM"),
        ("SELECT JOIN S [ROWS 1]", "JOIN"),
        ("SELECT a WHERE a = 1", "WHERE"),
        ("SELECT a", "a"),
        ("FROM S [ROWS 1] WHERE a = 1", "FROM"),
        ("SELECT a FROM S [RANGE]", "]"),
        ("SELECT a FROM S [RANGE 10 FORTNIGHTS]", "FORTNIGHTS"),
        ("SELECT a FROM S [RANGE 10 SECONDS", "SECONDS"),
        ("SELECT a FROM S [ROWS 10 WHERE a = 1", "WHERE"),
        ("SELECT a FROM S WINDOW [abc]", "abc"),
        ("SELECT a FROM S WINDOW [1 FORTNIGHT]", "FORTNIGHT"),
        ("SELECT a FROM S [ROWS 1.5]", "1.5"),
        ("SELECT a FROM S [1]", "1"),
        ("SELECT a FROM S [PARTITION BY S.a]", "]"),
        ("SELECT a FROM S [ROWS 1] AS s [ROWS 2]", "["),
        ("SELECT a FROM S WINDOW [1] WINDOW [2]", "WINDOW"),
        ("SELECT a FROM S WINDOW [1 PRECEDING]", "PRECEDING"),
        ("SELECT a FROM S WINDOW [ROWS 1]", "ROWS"),
        ("SELECT a FROM S [RANGE 1 'SECONDS']", "'SECONDS'"),
        ("SELECT a FROM S [RANGE 1e999]", "1e999"),
        ("SELECT a FROM S [RANGE -1]", "-"),
    ],
)
def test_syntax_errors_locate_the_token(sql: str, token: str) -> None:
    with pytest.raises(CQLSyntaxError) as info:
        parse(sql)
    error = info.value
    assert error.line == 1 and isinstance(error.col, int) and error.col >= 1
    assert error.token == token
    assert "line 1" in str(error) and token in str(error)


def test_syntax_error_on_a_later_line() -> None:
    with pytest.raises(CQLSyntaxError) as info:
        parse("SELECT a\nFROM S [RANGE 1 SECOND]\nWHERE a >")
    assert info.value.line == 3 and info.value.token == ">"
    assert "<class" not in str(info.value)


def test_unterminated_string_is_a_syntax_error() -> None:
    with pytest.raises(CQLSyntaxError) as info:
        parse("SELECT a FROM S\nWHERE b = 'abc")
    assert info.value.line == 2 and info.value.token.startswith("'abc")


@pytest.mark.parametrize("sql", ["", "   ", "\n", ";", "-- nothing here"])
def test_empty_query(sql: str) -> None:
    with pytest.raises(CQLSyntaxError, match="empty"):
        parse(sql)


def test_two_statements() -> None:
    with pytest.raises(CQLSyntaxError, match="one statement") as info:
        parse("SELECT a FROM S; SELECT b FROM T")
    assert info.value.token == "SELECT" and info.value.line == 1
    # a trailing semicolon is fine
    assert isinstance(parse("SELECT a FROM S [NOW];"), exp.Select)


@pytest.mark.parametrize(
    "sql",
    [
        "DELETE FROM S",
        "INSERT INTO S VALUES (1)",
        "UPDATE S SET a = 1",
        "CREATE TABLE S (a INT)",
        "DROP TABLE S",
        "SHOW TABLES",
        "SELECT a FROM S UNION SELECT a FROM T",
    ],
)
def test_non_select_statements(sql: str) -> None:
    with pytest.raises(CQLSyntaxError, match="SELECT continuous query") as info:
        parse(sql)
    assert info.value.line == 1 and info.value.token


def test_deep_nesting_is_a_syntax_error() -> None:
    with pytest.raises(CQLSyntaxError):
        parse("SELECT " + "(" * 3000 + "1" + ")" * 3000 + " FROM S")


def test_non_string_input() -> None:
    with pytest.raises(CQLSyntaxError):
        parse(None)  # type: ignore[arg-type]


# Fuzzing: mutated valid queries either parse to a Select or raise CQLSyntaxError.
POOL = [
    "SELECT", "FROM", "WHERE", "GROUP", "BY", "GROUP BY", "HAVING", "WINDOW", "AND", "OR",
    "NOT", "IN", "BETWEEN", "JOIN", "ON", "AS", "RANGE", "ROWS", "PARTITION", "PARTITION BY",
    "NOW", "UNBOUNDED", "PRECEDING", "SECONDS", "MINUTE", "MILLISECONDS", "HOURS", "FORTNIGHT",
    "COUNT(*)", "MAX(", "(", ")", "[", "]", "[[", "]]", ",", ".", ";", "*", "=", "<>", "!=",
    "<", "<=", ">", ">=", "1", "2.5", "0", "1e999", "-", "'x'", "'", '"', "S", "S.a", "a",
    "INSERT", "DELETE", "UNION", "SELECT *", "WITH", "OVER", "LIMIT", "--", "/*", "::", "?",
]


@st.composite
def mutated_queries(draw: st.DrawFn) -> str:
    words = draw(st.sampled_from(VALID)).split()
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["drop", "swap", "insert"]))
        if op == "drop" and words:
            del words[draw(st.integers(0, len(words) - 1))]
        elif op == "swap" and len(words) > 1:
            i = draw(st.integers(0, len(words) - 1))
            j = draw(st.integers(0, len(words) - 1))
            words[i], words[j] = words[j], words[i]
        else:
            words.insert(draw(st.integers(0, len(words))), draw(st.sampled_from(POOL)))
    return " ".join(words)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated_queries())
def test_mutated_queries_parse_or_raise_syntax_error(sql: str) -> None:
    try:
        select = parse(sql)
    except CQLSyntaxError as error:
        assert str(error)
        return
    assert isinstance(select, exp.Select)
    # Whatever parses also writes back with its windows. Only the windows are compared:
    # sqlglot's base grammar accepts oddities (`FROM . . S`, `S AS 1`) that it does not
    # write back in the same form.
    out = select.sql(dialect=CQL)
    try:
        again = parse(out)
    except CQLSyntaxError:
        return
    assert sorted(w.sql(dialect=CQL) for w in again.find_all(StreamWindow)) == sorted(
        w.sql(dialect=CQL) for w in select.find_all(StreamWindow)
    )


@pytest.mark.parametrize("sql, said, col", [
    ("SELEC * FROM S WINDOW [1]", "expected SELECT at the start of a query, found 'SELEC'", 1),
    ("SELCT S.a FROM S WINDOW [1]", "expected SELECT at the start of a query, found 'SELCT'",
     1),
    ("SELECT * FROM S WHERE S.a > AND S.b = 1 WINDOW [1]", "expected a value after '>'", 29),
    ("SELECT S.a * FROM S WINDOW [1]", "expected a value after '*'", 14),
    ("SELECT * FROM S WHERE (S.a = 1 WINDOW [1]",
     "expected ')' to close the '(' at line 1, column 23", None),
    ("SELECT COUNT(*) FROM TCP GROUP BY window(TCP.ts, '10 seconds')",
     "CQL writes a window after its stream, as TCP [RANGE 10 SECONDS], not as a function "
     "call", 35),
    ("SELECT COUNT(*) FROM S GROUP BY TUMBLE(S.ts, '5 minutes')",
     "CQL writes a window after its stream, as S [RANGE 5 MINUTES]", 33),
])
def test_typos_say_what_cql_expected_there(sql: str, said: str, col: int | None) -> None:
    """sqlglot's internals ("Required keyword: 'expression' missing for Mul", "Expecting )")
    never reach the user: each error says what CQL expected, at the position."""
    with pytest.raises(CQLSyntaxError) as info:
        parse(sql)
    message = str(info.value)
    assert message.startswith("syntax error: line 1, column ") and said in message
    assert col is None or info.value.col == col
    assert "Required keyword" not in message and "Expecting" not in message
