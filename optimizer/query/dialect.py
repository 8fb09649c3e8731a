"""A sqlglot dialect for CQL continuous queries.

Two window notations are read natively by the tokenizer and parser (the query
text is never rewritten before sqlglot sees it):

* the OM paper's query-level window, a modifier after WHERE/GROUP BY/HAVING:
  ``... WHERE TCP.dest_host = 2 WINDOW [1]`` or ``WINDOW [500 MILLISECONDS]``;
* CQL's per-stream windows (STREAM paper) after a table in FROM or JOIN:
  ``S [RANGE 10 SECONDS]``, ``S [ROWS 100 PRECEDING]``, ``S [NOW]``,
  ``S [UNBOUNDED]``, ``S [PARTITION BY S.a ROWS 10]``, with an alias either
  before or after the window.

Both kinds of window are :class:`StreamWindow` nodes. A per-stream window is
stored in the ``"stream_window"`` arg of its :class:`sqlglot.exp.Table`, the
query-level window in the ``"stream_window"`` arg of the :class:`sqlglot.exp.Select`.
Use :func:`table_window`, :func:`query_window` and :func:`window_seconds`
rather than reading the args directly.

Example:
    >>> q = parse("SELECT COUNT(*) FROM S [RANGE 2 minute] AS s WHERE s.a > 5 WINDOW [1]")
    >>> w = table_window(q.find(exp.Table))
    >>> w.kind, w.size.this, w.unit, window_seconds(w)
    ('range', '2', 'MINUTES', 120.0)
    >>> window_seconds(query_window(q))
    1.0
    >>> q.sql(dialect=CQL)
    'SELECT COUNT(*) FROM S [RANGE 2 MINUTES] AS s WHERE s.a > 5 WINDOW [1 SECONDS]'
"""

from __future__ import annotations

import math
import re
import typing as t

from sqlglot import exp, generator, tokens
from sqlglot.dialects.dialect import Dialect
from sqlglot.errors import ErrorLevel, ParseError, TokenError
from sqlglot.parsers.base import BaseParser
from sqlglot.tokens import Token, TokenType

from cqopt.optimizer.query.cql_errors import check_cql_shape, in_cql_words
from cqopt.optimizer.query.errors import CQLSyntaxError
from cqopt.optimizer.query.stray_tokens import NoStrayTokens

# The arg under which a window hangs off an exp.Table (per-stream window) or an
# exp.Select (query-level window). Select's own "windows" arg keeps its SQL meaning
# (named windows, WINDOW w AS (...)).
WINDOW_ARG = "stream_window"

# Canonical unit -> seconds; every spelling in _UNIT_ALIASES maps onto these.
UNIT_SECONDS: dict[str, float] = {
    "MILLISECONDS": 0.001,
    "SECONDS": 1.0,
    "MINUTES": 60.0,
    "HOURS": 3600.0,
}
_UNIT_ALIASES: dict[str, str] = {
    **{unit: unit for unit in UNIT_SECONDS},
    **{unit[:-1]: unit for unit in UNIT_SECONDS},
}

class StreamWindow(exp.Expression):
    """A CQL window: ``[RANGE 10 SECONDS]``, ``[ROWS 5]``, ``[NOW]``, ``WINDOW [1]`` ...

    ``kind`` is a plain lowercase str (``"range"``, ``"rows"``, ``"now"`` or
    ``"unbounded"``); plain str args survive copy, hashing and equality in sqlglot.
    ``size`` is a number exp.Literal, ``unit`` a canonical unit of UNIT_SECONDS
    (range windows only), ``partition_by`` a list of exp.Column and
    ``preceding`` True when the optional PRECEDING keyword was written.
    """

    arg_types = {
        "kind": True,
        "size": False,
        "unit": False,
        "partition_by": False,
        "preceding": False,
    }

    @property
    def kind(self) -> str:
        return self.args["kind"]

    @property
    def size(self) -> exp.Literal | None:
        return self.args.get("size")

    @property
    def unit(self) -> str | None:
        return self.args.get("unit")

    @property
    def partition_by(self) -> list[exp.Column]:
        return self.args.get("partition_by") or []

    @property
    def preceding(self) -> bool:
        return bool(self.args.get("preceding"))


_AFTER_TABLE = -1  # a join whose table has been read (CQLParser._parse_joins)


def _is_number(text: str) -> bool:
    # The tokenizer's NUMBER scanner accepts any str.isdigit() character (e.g. "²"),
    # so check that Python can actually read the size.
    try:
        return text.isascii() and math.isfinite(float(text))
    except ValueError:
        return False


class CQLParser(NoStrayTokens):
    QUERY_MODIFIER_PARSERS = {
        **BaseParser.QUERY_MODIFIER_PARSERS,
        TokenType.WINDOW: lambda self: self._parse_window_modifier(),
    }

    def reset(self) -> None:
        super().reset()
        # One entry per _parse_join under way: the table depth its own table is parsed
        # at, then AFTER_TABLE once that table is read (see _parse_joins).
        self._join_marks: list[int] = []
        self._table_depth = 0

    def _parse_join(self, *args: t.Any, **kwargs: t.Any) -> exp.Join | None:
        self._join_marks.append(self._table_depth)
        try:
            return super()._parse_join(*args, **kwargs)
        finally:
            self._join_marks.pop()

    def _parse_joins(self, alias_tokens: t.Any = None) -> t.Iterator[exp.Join]:
        # After `JOIN S` without ON, sqlglot reads the joins that follow as nested in S
        # (`A JOIN S JOIN T ON .. ON ..`), and reads them again when no ON closes the
        # nest: two tries per join, 2^n for a chain of n. A continuous query has no
        # nested joins (check_supported refuses them), so that try is never made.
        if self._join_marks and self._join_marks[-1] == _AFTER_TABLE:
            return iter(())
        return super()._parse_joins(alias_tokens=alias_tokens)

    def _warn_unsupported(self) -> None:
        # Instead of logging and falling back to an opaque exp.Command (SHOW, SET, ...),
        # report the statement: a continuous query is a SELECT.
        self.raise_error(
            "Unsupported statement, expected a SELECT continuous query",
            self._tokens[0] if self._tokens else None,
        )

    def _parse_projections(self) -> tuple[list[exp.Expr], list[exp.Expr] | None]:
        # The base parser accepts `SELECT FROM S` and `SELECT JOIN S ...` with no projections
        projections, exclude = super()._parse_projections()
        if not projections:
            self.raise_error("Expected a column, * or expression after SELECT")
        return projections, exclude

    def _parse_query_modifiers(self, this: t.Any) -> t.Any:
        # ... and a SELECT without FROM; a continuous query always reads a stream
        if isinstance(this, exp.Select) and not this.args.get("from_"):
            self.raise_error("Expected FROM and the streams the query reads")
        return super()._parse_query_modifiers(this)

    def _parse_from(
        self,
        joins: bool = False,
        skip_from_token: bool = False,
        consume_pipe: bool = False,
    ) -> exp.From | None:
        # consume_pipe is only set for DuckDB's FROM-first queries (`FROM S WHERE ...`),
        # which nest their joins inside the table; a continuous query starts with SELECT.
        if consume_pipe and self._match(TokenType.FROM, advance=False):
            self.raise_error("Expected SELECT, a continuous query starts with SELECT")
        return super()._parse_from(
            joins=joins, skip_from_token=skip_from_token, consume_pipe=consume_pipe
        )

    def _parse_window_modifier(self) -> tuple[str, t.Any]:
        # CQL's WINDOW [..] replaces SQL's named WINDOW clause, which is still read
        # when WINDOW is not followed by a bracket.
        if self._next and self._next.token_type == TokenType.L_BRACKET:
            self._advance(2)
            return WINDOW_ARG, self._parse_stream_window_body(query_level=True)
        return "windows", self._parse_window_clause()

    def _parse_table_parts(
        self,
        schema: bool = False,
        is_db_reference: bool = False,
        wildcard: bool = False,
        fast: bool = False,
    ) -> exp.Table | exp.Dot | None:
        table = super()._parse_table_parts(
            schema=schema, is_db_reference=is_db_reference, wildcard=wildcard, fast=fast
        )

        # The window must be consumed before _parse_table's _parse_bracket reads
        # `S [1]` as an array subscript (exp.Bracket). The fast path never gets here
        # with a bracket: it backs off when the table is followed by one.
        if (
            not fast
            and not schema
            and not is_db_reference
            and isinstance(table, exp.Table)
            and self._match(TokenType.L_BRACKET)
        ):
            table.set(WINDOW_ARG, self._parse_stream_window_body())
        if isinstance(table, exp.Table) and self._match(TokenType.STAR, advance=False):
            # Postgres's `FROM S *` (S and its child tables), which sqlglot drops
            self.raise_error(f"unexpected '*' after the stream {table.name}")
        return table

    def _parse_table(self, *args: t.Any, **kwargs: t.Any) -> exp.Expr | None:
        depth = self._table_depth
        self._table_depth += 1
        try:
            this = super()._parse_table(*args, **kwargs)
        finally:
            self._table_depth = depth
        if self._join_marks and self._join_marks[-1] == depth:
            self._join_marks[-1] = _AFTER_TABLE  # the join's own table, not one inside it

        # `FROM S AS s [RANGE 1 SECOND]`: the window written after the alias
        if isinstance(this, exp.Table) and self._match(TokenType.L_BRACKET):
            if this.args.get(WINDOW_ARG):
                self.raise_error("A stream can have only one window", self._prev)
            this.set(WINDOW_ARG, self._parse_stream_window_body())
        return this

    def _parse_stream_window_body(self, query_level: bool = False) -> StreamWindow:
        """Parses a window after its opening `[`, up to and including the `]`."""
        start = self._prev
        if query_level:
            size = self._parse_window_size("window size")
            window = StreamWindow(kind="range", size=size, unit=self._parse_window_unit())
        elif self._match_text_seq("NOW"):
            window = StreamWindow(kind="now")
        elif self._match_text_seq("UNBOUNDED") or self._match_text_seq("RANGE", "UNBOUNDED"):
            window = StreamWindow(kind="unbounded")
        elif self._match(TokenType.RANGE):
            size = self._parse_window_size("RANGE size")
            window = StreamWindow(kind="range", size=size, unit=self._parse_window_unit())
            window.set("preceding", self._match_text_seq("PRECEDING") or None)
        else:
            partition_by = None
            if self._match(TokenType.PARTITION_BY) or self._match_text_seq("PARTITION", "BY"):
                partition_by = self._parse_csv(self._parse_partition_column)
            if not self._match(TokenType.ROWS):
                expected = (
                    "ROWS" if partition_by else "RANGE, ROWS, PARTITION BY, NOW or UNBOUNDED"
                )
                self.raise_error(f"Expected {expected} in the stream window")
            size = self._parse_window_size("ROWS count", integer=True)
            window = StreamWindow(kind="rows", size=size, partition_by=partition_by)
            window.set("preceding", self._match_text_seq("PRECEDING") or None)

        if not self._match(TokenType.R_BRACKET):
            self.raise_error(f"Expected ] to close the window opened at line {start.line}")
        return self.expression(window, start)

    def _parse_partition_column(self) -> exp.Column | None:
        column = self._parse_column()
        if not isinstance(column, exp.Column) or column.is_star:
            self.raise_error("Expected a column in PARTITION BY", self._prev)
        return column

    def _parse_window_size(self, what: str, integer: bool = False) -> exp.Literal:
        if not self._match(TokenType.NUMBER):
            self.raise_error(f"Expected a number for the {what}", self._curr or self._prev)
        text = self._prev.text
        if not _is_number(text):
            self.raise_error(f"The {what} '{text}' is not a finite number", self._prev)
        if integer and not (text.isascii() and text.isdigit()):
            self.raise_error(f"The {what} must be a whole number", self._prev)
        return exp.Literal.number(text)

    def _parse_window_unit(self) -> str:
        curr = self._curr
        if (
            not curr
            or curr.token_type in (TokenType.R_BRACKET, TokenType.SENTINEL)
            or self._match_text_seq("PRECEDING", advance=False)
        ):
            return "SECONDS"  # the papers' default unit

        # quoted text ('SECONDS', "SECONDS") is not a unit
        unit = None
        if curr.token_type not in self.TEXT_MATCH_EXCLUDED_TOKENS:
            unit = _UNIT_ALIASES.get(curr.text.upper())
        if unit is None:
            self.raise_error(
                f"Unknown window unit '{curr.text}', expected one of {', '.join(UNIT_SECONDS)}"
            )
        self._advance()
        return t.cast(str, unit)


class CQLGenerator(generator.Generator):
    TRANSFORMS = {
        **generator.Generator.TRANSFORMS,
        StreamWindow: lambda self, e: self.streamwindow_sql(e),
    }

    AFTER_HAVING_MODIFIER_TRANSFORMS = {
        **generator.Generator.AFTER_HAVING_MODIFIER_TRANSFORMS,
        WINDOW_ARG: lambda self, e: (
            f"{self.seg('WINDOW')} {self.sql(e, WINDOW_ARG)}" if e.args.get(WINDOW_ARG) else ""
        ),
    }

    def streamwindow_sql(self, expression: StreamWindow) -> str:
        kind = expression.kind
        size = self.sql(expression, "size")
        unit = expression.unit or "SECONDS"

        if isinstance(expression.parent, exp.Select):
            return f"[{size} {unit}]"
        if kind in ("now", "unbounded"):
            return f"[{kind.upper()}]"

        preceding = " PRECEDING" if expression.preceding else ""
        if kind == "range":
            return f"[RANGE {size} {unit}{preceding}]"

        partition = self.expressions(expression, key="partition_by", flat=True)
        partition = f"PARTITION BY {partition} " if partition else ""
        return f"[{partition}ROWS {size}{preceding}]"

    def table_parts(self, expression: exp.Table) -> str:
        # table_sql writes the name, then the alias, hints and nested joins (FROM-first
        # queries); writing the window with the name puts it where CQL has it:
        # `S [RANGE 1 SECONDS] AS s JOIN ...`
        window = expression.args.get(WINDOW_ARG)
        name = super().table_parts(expression)
        return f"{name} {self.sql(window)}" if window else name


class CQL(Dialect):
    """CQL continuous queries: SQL SELECT plus per-stream and query-level windows."""

    class Tokenizer(tokens.Tokenizer):
        # Pinned because some dialects (T-SQL, SQLite) quote identifiers with [ ];
        # in CQL the brackets delimit windows.
        SINGLE_TOKENS = {
            **tokens.Tokenizer.SINGLE_TOKENS,
            "[": TokenType.L_BRACKET,
            "]": TokenType.R_BRACKET,
        }

    Parser = CQLParser
    Generator = CQLGenerator


def _location(sql: str, offset: int) -> tuple[int, int]:
    """1-based line and column of a character offset into sql."""
    offset = max(0, min(offset, len(sql)))
    line = sql.count("\n", 0, offset) + 1
    return line, offset - (sql.rfind("\n", 0, offset) + 1) + 1


def _token_error(sql: str, tokenizer: tokens.Tokenizer, error: TokenError) -> CQLSyntaxError:
    # TokenError carries no line/column; the tokenizer stops on the offending token.
    start = getattr(getattr(tokenizer, "_core", tokenizer), "_start", None)
    if not isinstance(start, int):
        start = error.start or 0
    current = getattr(getattr(tokenizer, "_core", tokenizer), "_current", start + 1)
    token = sql[start : max(current, start + 1)][:40].strip() or None
    cause = error.__cause__ or error
    message = str(cause).split(" from ")[0] if isinstance(cause, TokenError) else "cannot tokenize"
    line, col = _location(sql, start)
    return CQLSyntaxError(message, line, col, token)


# sqlglot's descriptions embed reprs such as "<Token token_type: TokenType.WHERE, text: WHERE,
# line: 1, ...>" and "<class 'sqlglot.expressions.core.GT'>"; keep only the readable part.
_TOKEN_REPR = re.compile(r"<Token token_type: [^,]*, text: (.*?), line: \d+, col: \d+.*?>", re.S)
_CLASS_REPR = re.compile(r"<class '(?:[\w.]*\.)?(\w+)'>")


def _parse_error(error: ParseError, token_list: list[Token]) -> CQLSyntaxError:
    details = error.errors[0] if error.errors else {}
    message = details.get("description") or str(error).split("\n")[0]
    message = _CLASS_REPR.sub(r"\1", _TOKEN_REPR.sub(r"'\1'", message))
    line, col, near = details.get("line"), details.get("col"), details.get("highlight")
    said = in_cql_words(message, token_list, line, col)
    if col is not None and near and "\n" not in near:  # sqlglot's column is the token's end
        col = max(1, col - len(near) + 1)
    return CQLSyntaxError(said, line, col, near or None)


# Bounds on a query, checked before sqlglot parses it (parse time grows with each).
MAX_QUERY_CHARS = 250_000  # a 10,000-value IN list of six-digit numbers is 80,000
MAX_STREAMS = 32  # FROM items and JOINs; OM's exhaustive search stops at 6
MAX_IN_VALUES = 10_000  # one IN list; it groups in n log n, but parses at ~20 µs a value
MAX_NESTING = 32  # parentheses within parentheses

# The clauses that end a FROM list (whose commas separate streams).
_AFTER_FROM = frozenset({TokenType.WHERE, TokenType.GROUP_BY, TokenType.HAVING,
                         TokenType.WINDOW, TokenType.ORDER_BY, TokenType.QUALIFY,
                         TokenType.LIMIT, TokenType.SEMICOLON})


def check_size(token_list: list[Token]) -> None:
    """Refuse a query beyond :data:`MAX_STREAMS`, :data:`MAX_IN_VALUES` or :data:`MAX_NESTING`.

    One pass over the tokens (the tokenizer is linear): counts the streams
    (FROM items, JOINs, commas of a FROM list), the values of each IN list and
    the depth of parentheses, so that no query makes the parser run long.

    >>> check_size(CQL().tokenize("SELECT S.a FROM S WHERE S.a IN (1, 2) WINDOW [1]"))
    >>> check_size(CQL().tokenize("SELECT S.a FROM S" + " JOIN S" * 40))
    Traceback (most recent call last):
    ...
    cqopt.optimizer.query.errors.CQLSyntaxError: syntax error: line 1, column 239: the query reads more than 32 streams (FROM items and JOINs); a query may read at most 32 (near 'JOIN')
    """
    streams, depth, from_depth = 0, 0, None
    in_lists: list[list[int]] = []  # per open IN list: [its depth, its values so far]
    previous = None
    for tok in token_list:
        kind = tok.token_type
        if kind == TokenType.L_PAREN:
            depth += 1
            if depth > MAX_NESTING:
                raise _too_large(tok, f"the query nests parentheses more than {MAX_NESTING} "
                                      f"deep; at most {MAX_NESTING} levels")
            if previous == TokenType.IN:
                in_lists.append([depth, 1])
        elif kind == TokenType.R_PAREN:
            if in_lists and in_lists[-1][0] == depth:
                in_lists.pop()
            depth -= 1
        elif kind == TokenType.COMMA:
            if in_lists and in_lists[-1][0] == depth:
                in_lists[-1][1] += 1
                if in_lists[-1][1] > MAX_IN_VALUES:
                    raise _too_large(tok, f"an IN list has more than {MAX_IN_VALUES:,} values; "
                                          f"at most {MAX_IN_VALUES:,}: split the query or "
                                          "use a range (BETWEEN)")
            elif from_depth == depth:
                streams += 1
        elif kind in (TokenType.FROM, TokenType.JOIN):
            streams += 1
            from_depth = depth
        elif kind in _AFTER_FROM and from_depth == depth:
            from_depth = None
        if streams > MAX_STREAMS:
            raise _too_large(tok, f"the query reads more than {MAX_STREAMS} streams (FROM "
                                  f"items and JOINs); a query may read at most {MAX_STREAMS}")
        previous = kind


def _too_large(tok: Token, message: str) -> CQLSyntaxError:
    return CQLSyntaxError(message, tok.line, tok.col, tok.text)


def parse(sql: str) -> exp.Select:
    """Parses one CQL continuous query.

    The query's size is checked first (:data:`MAX_QUERY_CHARS`, then
    :func:`check_size` on its tokens), so parsing takes milliseconds.

    Raises:
        CQLSyntaxError: the text is not exactly one well-formed SELECT statement, or
        is larger than the bounds above.
    """
    if not isinstance(sql, str):
        raise CQLSyntaxError(f"a query must be a string, not {type(sql).__name__}")
    if len(sql) > MAX_QUERY_CHARS:
        raise CQLSyntaxError(f"the query has {len(sql):,} characters; at most "
                             f"{MAX_QUERY_CHARS:,}")

    dialect = CQL()
    tokenizer = dialect.tokenizer()
    try:
        token_list = tokenizer.tokenize(sql)
    except TokenError as e:
        raise _token_error(sql, tokenizer, e) from None
    except Exception as e:  # noqa: BLE001
        raise CQLSyntaxError(f"cannot tokenize the query ({e!r})", *_location(sql, 0)) from None

    if not any(tok.token_type != TokenType.SEMICOLON for tok in token_list):
        raise CQLSyntaxError("empty query, expected a SELECT continuous query", 1, 1)
    check_size(token_list)
    check_cql_shape(token_list)

    parser = dialect.parser(error_level=ErrorLevel.IMMEDIATE)
    try:
        statements = [s for s in parser.parse(token_list, sql) if s is not None]
    except ParseError as e:
        raise _parse_error(e, token_list) from None
    except Exception as e:  # noqa: BLE001
        # Pathological nesting (RecursionError) or a sqlglot parser bug on odd input;
        # either way the text is not a query we can read: point at where parsing stopped
        near: Token | None = getattr(parser, "_curr", None) or getattr(parser, "_prev", None)
        kind = "the query is nested too deeply" if isinstance(e, RecursionError) else repr(e)
        raise CQLSyntaxError(
            f"cannot parse the query: {kind}",
            near.line if near else None,
            near.col if near else None,
            near.text if near else None,
        ) from None

    if len(statements) != 1:
        second = _second_statement(token_list)
        raise CQLSyntaxError(
            f"expected one statement, found {len(statements)}",
            second.line if second else None,
            second.col if second else None,
            second.text if second else None,
        )

    select = statements[0]
    if not isinstance(select, exp.Select):
        first = token_list[0]
        raise CQLSyntaxError(
            f"the statement must be a SELECT continuous query, found {select.key.upper()}",
            first.line,
            first.col,
            first.text,
        )
    return select


def _second_statement(token_list: list[Token]) -> Token | None:
    """The first token after a `;` that starts another statement."""
    seen_statement = after_semicolon = False
    for tok in token_list:
        if tok.token_type == TokenType.SEMICOLON:
            after_semicolon = seen_statement
        elif after_semicolon:
            return tok
        else:
            seen_statement = True
    return None


def table_window(table: exp.Table) -> StreamWindow | None:
    """The per-stream window of a FROM/JOIN table, e.g. ``S [ROWS 10]``; None if it has none."""
    window = table.args.get(WINDOW_ARG)
    return window if isinstance(window, StreamWindow) else None


def query_window(select: exp.Select) -> StreamWindow | None:
    """The query-level ``WINDOW [...]`` window of a SELECT; None if it has none."""
    window = select.args.get(WINDOW_ARG)
    return window if isinstance(window, StreamWindow) else None


def window_seconds(window: StreamWindow) -> float | None:
    """The size of a range window in seconds; None for rows, now and unbounded windows."""
    size = window.size
    if window.kind != "range" or size is None:
        return None
    return float(size.this) * UNIT_SECONDS[window.unit or "SECONDS"]
