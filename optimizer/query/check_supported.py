"""Refuse what cqopt does not read: the first step of building a logical query.

sqlglot parses many clauses a continuous query does not have (QUALIFY, PIVOT,
TABLESAMPLE, GROUP BY ALL, outer joins, ...). One left unread would be silently
ignored (``QUALIFY A.x = 2`` dropped from the result), so what cqopt reads of
each node is an allowlist, and :func:`check_supported` raises
:class:`~cqopt.optimizer.query.errors.UnsupportedQueryError` for anything else, with
the clause's name where it is known. It only looks at the tree's shape: names
are resolved later (:mod:`cqopt.optimizer.query.bind`).

>>> from cqopt.optimizer.query.dialect import parse
>>> check_supported(parse("SELECT A.x FROM A JOIN B ON A.x = B.x WINDOW [1]"))
>>> check_supported(parse("SELECT A.x FROM A WHERE A.x = 1 QUALIFY A.x = 2"))
Traceback (most recent call last):
...
cqopt.optimizer.query.errors.UnsupportedQueryError: QUALIFY is not supported in a continuous query
"""

from __future__ import annotations

from sqlglot import exp

from cqopt.optimizer.query.dialect import CQL, WINDOW_ARG
from cqopt.optimizer.query.errors import UnsupportedQueryError

# What cqopt reads of a parsed query, per node. Any other truthy arg is refused.
SELECT_ARGS = frozenset({"expressions", "from_", "from", "joins", "where", "group", "having",
                         WINDOW_ARG})
TABLE_ARGS = frozenset({"this", "alias", WINDOW_ARG})
JOIN_ARGS = frozenset({"this", "on", "side", "kind"})  # side and kind are checked apart
GROUP_ARGS = frozenset({"expressions"})
JOIN_KINDS = ("", "INNER", "CROSS")
SELECT_CLAUSES = {
    "with_": "WITH (common table expressions)", "with": "WITH (common table expressions)",
    "order": "ORDER BY", "limit": "LIMIT / FETCH", "offset": "OFFSET",
    "distinct": "SELECT DISTINCT",
    "qualify": "QUALIFY", "into": "SELECT ... INTO", "connect": "CONNECT BY",
    "locks": "FOR UPDATE (a locking clause)", "sort": "SORT BY", "cluster": "CLUSTER BY",
    "distribute": "DISTRIBUTE BY", "windows": "a named window (WINDOW w AS (...))",
    "laterals": "LATERAL VIEW", "pivots": "PIVOT / UNPIVOT", "sample": "TABLESAMPLE",
    "kind": "SELECT AS STRUCT / VALUE", "hint": "a query hint", "exclude": "SELECT * EXCLUDE",
    "prewhere": "PREWHERE", "settings": "SETTINGS", "options": "OPTION (...)",
    "match": "MATCH_RECOGNIZE",
}
TABLE_CLAUSES = {
    "pivots": "PIVOT / UNPIVOT", "sample": "TABLESAMPLE", "hints": "a table hint such as "
    "WITH (NOLOCK)", "when": "time travel (AT / BEFORE)", "version": "time travel "
    "(FOR SYSTEM_TIME AS OF)", "system_time": "time travel (FOR SYSTEM_TIME AS OF)",
    "changes": "CHANGES", "ordinality": "WITH ORDINALITY", "partition": "PARTITION (...)",
    "only": "ONLY", "indexed": "INDEXED BY", "laterals": "LATERAL VIEW",
    "joins": "a nested join", "rows_from": "ROWS FROM",
}
GROUP_CLAUSES = {"all": "GROUP BY ALL", "rollup": "WITH ROLLUP", "cube": "WITH CUBE",
                 "grouping_sets": "GROUPING SETS", "totals": "WITH TOTALS"}
JOIN_CLAUSES = {"match_condition": "MATCH_CONDITION", "global_": "GLOBAL JOIN",
                "directed": "DIRECTED JOIN"}


def check_supported(select: exp.Select) -> None:
    """Raise for any part of ``select`` cqopt would not read.

    Parameters
    ----------
    select
        A parsed CQL query (:func:`cqopt.optimizer.query.dialect.parse`).

    Raises
    ------
    UnsupportedQueryError
        A subquery, an SQL window function, a clause outside the allowlist,
        ``* EXCEPT (...)`` and the like, an outer join, ``JOIN ... USING``, or a FROM item with a qualifier or
        column aliases.
    """
    for node in select.walk():
        if node is not select and isinstance(node, (exp.Select, exp.Subquery,
                                                    exp.SetOperation)):
            raise UnsupportedQueryError("subqueries are not supported: write one SELECT "
                                        "over streams")
        if isinstance(node, exp.Window):
            raise UnsupportedQueryError("SQL window functions (OVER ...) are not "
                                        "supported; use a stream window such as "
                                        "S [RANGE 10 SECONDS]")
    refuse_unread(select, SELECT_ARGS, SELECT_CLAUSES, "a continuous query")
    for item in select.expressions:
        _check_star(item.this if isinstance(item, exp.Alias) else item)
    if select.args.get("group") is not None:
        refuse_unread(select.args["group"], GROUP_ARGS, GROUP_CLAUSES, "a continuous query")
    joins = select.args.get("joins") or []
    from_ = select.args.get("from_") or select.args.get("from")
    for table in ([from_.this] if from_ is not None else []) + [j.this for j in joins]:
        if isinstance(table, exp.Table):  # other FROM items: binding says why not
            _check_table(table)
    for join in joins:
        _check_join(join)


def refuse_unread(node: exp.Expression, allowed: frozenset[str], clauses: dict[str, str],
                  where: str) -> None:
    """Raise for any truthy arg of ``node`` outside ``allowed``, named by ``clauses``."""
    for arg, value in node.args.items():
        if not value or arg in allowed:
            continue
        what = clauses.get(arg)
        if what is None:  # a clause we have no name for: show what was written
            first = value[0] if isinstance(value, list) else value
            text = first.sql(dialect=CQL) if isinstance(first, exp.Expression) else ""
            what = f"{arg.rstrip('_').upper()}" + (f" ('{text}')" if text else "")
        raise UnsupportedQueryError(f"{what} is not supported in {where}")


def _check_star(node: exp.Expression) -> None:
    """``*`` and ``S.*`` select every column: no EXCEPT, REPLACE or RENAME."""
    star = node if isinstance(node, exp.Star) else node.this \
        if isinstance(node, exp.Column) and isinstance(node.this, exp.Star) else None
    if star is not None and any(star.args.values()):
        raise UnsupportedQueryError(f"'{node.sql(dialect=CQL)}' is not supported: "
                                    "list the columns to keep")


def _check_table(table: exp.Table) -> None:
    """A FROM item names a stream: no qualifier, column aliases or table clauses."""
    if table.args.get("db") or table.args.get("catalog"):
        raise UnsupportedQueryError(f"qualified stream name '{table.sql(dialect=CQL)}'"
                                    " is not supported: use the catalog's name")
    alias = table.args.get("alias")
    if alias is not None and alias.args.get("columns"):
        raise UnsupportedQueryError(f"column aliases in FROM ('{table.sql(dialect=CQL)}') "
                                    "are not supported: alias the stream only, A AS b")
    refuse_unread(table, TABLE_ARGS, TABLE_CLAUSES, "FROM")


def _check_join(join: exp.Join) -> None:
    """Only inner joins, with ON or none (a cross join)."""
    side, kind = (join.side or "").upper(), (join.kind or "").upper()
    if side or kind not in JOIN_KINDS:
        what = " ".join(w for w in (side, kind) if w) or "this"
        raise UnsupportedQueryError(f"{what} JOIN is not supported: only inner joins "
                                    "(JOIN ... ON, or FROM A, B WHERE ...)")
    if join.args.get("using"):
        raise UnsupportedQueryError("JOIN ... USING is not supported: write "
                                    "JOIN ... ON A.x = B.x")
    if join.args.get("method"):
        raise UnsupportedQueryError(f"{join.args['method']} JOIN is not supported")
    refuse_unread(join, JOIN_ARGS, JOIN_CLAUSES, "a join")
