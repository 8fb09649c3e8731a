"""The physical strategy of a join: how Spark runs one left-deep join step.

A :class:`~cqopt.optimizer.plans.nodes.JoinNode` carries one of
:data:`STRATEGIES` in its ``strategy`` field:

================== ===================== ====================================
strategy           Spark's join hint     what runs
================== ===================== ====================================
``auto``           none                  the engine's choice, from its own
                                         size estimates (every plan before
                                         strategies were planned)
``broadcast_left`` ``BROADCAST`` (left)  the left input is collected, shipped
                                         to every executor and hashed; the
                                         right is probed where it lies
``broadcast_right`` ``BROADCAST`` (right) the same, the right input built
``shuffle_hash``   ``SHUFFLE_HASH``      both inputs shuffled on the join
                   (right)               key, the right one hashed per
                                         partition
``sort_merge``     ``MERGE``             both inputs shuffled and sorted on
                                         the key, then merged
================== ===================== ====================================

The hints are Spark's (``/*+ BROADCAST(t) */``, ``DataFrame.hint``); a
hinted side is the one the hint names. A plan's id tags each join that is
not ``auto`` with :data:`TAGS` (``TCP⋈{br}UDP``), so plans that differ only
in strategies have distinct ids and an ``auto`` plan keeps the id it always had.

>>> [TAGS[s] for s in STRATEGIES]
['', 'bl', 'br', 'sh', 'sm']
>>> hinted_side("broadcast_left"), hinted_side("sort_merge"), hinted_side("auto")
('left', 'right', None)
"""

from __future__ import annotations

AUTO = "auto"
BROADCAST_LEFT = "broadcast_left"
BROADCAST_RIGHT = "broadcast_right"
SHUFFLE_HASH = "shuffle_hash"
SORT_MERGE = "sort_merge"

STRATEGIES: tuple[str, ...] = (AUTO, BROADCAST_LEFT, BROADCAST_RIGHT, SHUFFLE_HASH, SORT_MERGE)
HINTED: tuple[str, ...] = STRATEGIES[1:]  # the strategies a hint states

# A join's tag in a plan id, after the join symbol: ``A⋈{br}B``.
TAGS: dict[str, str] = {AUTO: "", BROADCAST_LEFT: "bl", BROADCAST_RIGHT: "br",
                        SHUFFLE_HASH: "sh", SORT_MERGE: "sm"}

# Spark's name of each hint (SQL comment hints and DataFrame.hint alike, any case).
SPARK_HINTS: dict[str, str] = {BROADCAST_LEFT: "BROADCAST", BROADCAST_RIGHT: "BROADCAST",
                               SHUFFLE_HASH: "SHUFFLE_HASH", SORT_MERGE: "MERGE"}

# How explain names each.
LABELS: dict[str, str] = {AUTO: "engine's choice", BROADCAST_LEFT: "broadcast left",
                          BROADCAST_RIGHT: "broadcast right", SHUFFLE_HASH: "shuffle hash",
                          SORT_MERGE: "sort merge"}


def split_id(plan_id: str) -> tuple[str, tuple[str, ...]]:
    """A plan id -> the id of the same plan with every join left to the engine, and each
    join step's strategy, left to right (the inverse of the tags :data:`TAGS` writes).

    >>> split_id("TCP⋈{br}UDP⋈{sh}SF[σπ]")
    ('TCP⋈UDP⋈SF[σπ]', ('broadcast_right', 'shuffle_hash'))
    >>> split_id("TCP⋈UDP")
    ('TCP⋈UDP', ('auto',))
    """
    import re

    by_tag = {tag: name for name, tag in TAGS.items() if tag}
    steps = tuple(by_tag.get(tag, AUTO)
                  for tag in re.findall(r"[⋈×](?:\{([a-z]+)\})?", plan_id))
    return re.sub(r"\{(?:%s)\}" % "|".join(by_tag), "", plan_id), steps


def hinted_side(strategy: str) -> str | None:
    """The input the strategy's hint names: ``"left"``, ``"right"``, or None for ``auto``."""
    if strategy == AUTO:
        return None
    return "left" if strategy == BROADCAST_LEFT else "right"
