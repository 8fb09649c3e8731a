"""A DataFrame built only when something uses it: the py4j calls of a frame never read are never made.

A micro-batch small enough to collect is worked out on the driver; its
Spark frames (the batch without its file columns, a query's streams of it,
its tuples tagged with their rounds) are needed only where a round's
tuples are too many for the driver or must be staged by Spark. Building
them anyway cost a ten-query workload some 600 of its 3,300 calls to the
JVM per micro-batch, each a round trip. :class:`DeferredFrame` holds the
recipe instead and builds the frame at the first attribute asked of it
(then forwards every one), so a caller keeps using it as the DataFrame it
stands for.

>>> calls = []
>>> frame = DeferredFrame(lambda: calls.append("built") or "frame")
>>> calls
[]
>>> frame.upper(), frame.upper(), calls
('FRAME', 'FRAME', ['built'])
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class DeferredFrame:
    """A frame (any object) made by ``build()`` at its first use; see the module docstring.

    Parameters
    ----------
    build : callable
        Makes the frame; called at most once.
    """

    __slots__ = ("_build", "_frame")

    def __init__(self, build: Callable[[], Any]):
        self._build = build
        self._frame: Any = None

    def built(self) -> Any:
        """The frame, built now if it was not yet."""
        if self._frame is None:
            self._frame = self._build()
            self._build = None
        return self._frame

    def if_built(self) -> Any:
        """The frame if something used it already, else None (nothing is built)."""
        return self._frame

    def __getattr__(self, name: str) -> Any:
        return getattr(self.built(), name)
