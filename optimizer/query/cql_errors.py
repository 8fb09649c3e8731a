"""Parse errors in CQL's words: what CQL expected at the position, not sqlglot's internals.

sqlglot describes a parse error by its own classes ("Required keyword: 'expression'
missing for Mul", "Expecting )"); :func:`in_cql_words` says what the query lacks
there, and :func:`check_cql_shape` refuses, before parsing, the shapes of other
languages: a query that does not start with SELECT (a misspelt keyword), a window
written as a function call (Spark's ``window(ts, '10 seconds')``, Flink's ``TUMBLE``).
"""

from __future__ import annotations

import re

from sqlglot.tokens import Token, TokenType

from cqopt.errors import shorten
from cqopt.optimizer.query.errors import CQLSyntaxError

# sqlglot's expression classes a "Required keyword ... missing for" names, as CQL writes them.
_OPERATORS = {"Mul": "*", "Div": "/", "Add": "+", "Sub": "-", "Mod": "%", "EQ": "=",
              "NEQ": "<>", "GT": ">", "GTE": ">=", "LT": "<", "LTE": "<=", "And": "AND",
              "Or": "OR", "Not": "NOT", "In": "IN", "Between": "BETWEEN", "Like": "LIKE",
              "Alias": "AS", "Paren": "("}
_REQUIRED = re.compile(r"Required keyword: '(\w+)' missing for (\w+)")


def in_cql_words(message: str, token_list: list[Token], line: int | None,
                  col: int | None) -> str:
    """sqlglot's description of a parse error as what CQL expected there.

    >>> in_cql_words("Required keyword: 'expression' missing for GT", [], 1, 9)
    "expected a value after '>'"
    >>> from cqopt.optimizer.query.dialect import CQL
    >>> tokens = CQL().tokenize("SELECT COUNT( FROM S")
    >>> in_cql_words("Expecting )", tokens, 1, 18)
    "expected ')' to close the '(' at line 1, column 13"
    >>> in_cql_words("Invalid expression / Unexpected token", [], 1, 3)
    'unexpected here'
    """
    required = _REQUIRED.fullmatch(message)
    if required:
        part, kind = required.groups()
        symbol = _OPERATORS.get(kind)
        if symbol is None:
            return f"expected {'an expression' if part in ('this', 'expression') else part} " \
                   f"to complete {kind.upper()}"
        return f"expected a value {'after' if part == 'expression' else 'before'} '{symbol}'"
    if message.startswith("Expecting )"):
        opened = _unclosed(token_list, line, col)
        return ("expected ')' to close the '('" +
                (f" at line {opened.line}, column {opened.col}" if opened else ""))
    if message.startswith("Invalid expression / Unexpected token"):
        return "unexpected here"
    if message.startswith("Expecting "):
        return "expected " + message.removeprefix("Expecting ")
    return message


def _unclosed(token_list: list[Token], line: int | None, col: int | None) -> Token | None:
    """The innermost '(' still open at ``line``, ``col``."""
    opened: list[Token] = []
    for tok in token_list:
        if line is not None and (tok.line, tok.col) >= (line, col or 0):
            break
        if tok.token_type == TokenType.L_PAREN:
            opened.append(tok)
        elif tok.token_type == TokenType.R_PAREN and opened:
            opened.pop()
    return opened[-1] if opened else None


# Window functions of other engines (Spark's window(ts, '10 seconds'), Flink's TUMBLE).
_WINDOW_CALLS = frozenset({"WINDOW", "TUMBLE", "HOP", "SESSION", "SESSION_WINDOW"})


def check_cql_shape(token_list: list[Token]) -> None:
    """Refuse, in CQL's words, the shapes other languages write: a query that does not start
    with SELECT (a misspelt keyword), a window written as a function call.

    >>> from cqopt.optimizer.query.dialect import CQL
    >>> check_cql_shape(CQL().tokenize("SELEC * FROM S WINDOW [1]"))
    Traceback (most recent call last):
    ...
    cqopt.optimizer.query.errors.CQLSyntaxError: syntax error: line 1, column 1: expected SELECT at the start of a query, found 'SELEC' (near 'SELEC')
    >>> check_cql_shape(CQL().tokenize(
    ...     "SELECT COUNT(*) FROM TCP GROUP BY window(TCP.ts, '10 seconds')"))
    Traceback (most recent call last):
    ...
    cqopt.optimizer.query.errors.CQLSyntaxError: syntax error: line 1, column 35: CQL writes a window after its stream, as TCP [RANGE 10 SECONDS], not as a function call (near 'window')
    """
    first = next((t for t in token_list if t.token_type != TokenType.SEMICOLON), None)
    if first is not None and first.token_type == TokenType.VAR:
        raise CQLSyntaxError(f"expected SELECT at the start of a query, found "
                             f"'{shorten(first.text, 20)}'", first.line,
                             first.col - len(first.text) + 1, first.text)
    for i, tok in enumerate(token_list[:-1]):
        if (tok.text.upper() in _WINDOW_CALLS
                and token_list[i + 1].token_type == TokenType.L_PAREN):
            size = next((t.text for t in token_list[i + 2:i + 8]
                         if t.token_type == TokenType.STRING), "")
            number, _, unit = size.strip().partition(" ")
            stream = next((token_list[j + 1].text for j, t in enumerate(token_list[:-1])
                           if t.token_type == TokenType.FROM), "S")
            window = (f"{number} {unit.upper().rstrip('S')}S" if number and unit
                      else "10 SECONDS")
            raise CQLSyntaxError(f"CQL writes a window after its stream, as {stream} "
                                 f"[RANGE {window}], not as a function call", tok.line,
                                 tok.col - len(tok.text) + 1, tok.text)
