"""What cqopt says on stderr while it works: counted work as a bar or as plain lines.

Every command says each step in a line of its own; work it can count
(cells costed, rounds replayed, a Spark job's tasks) goes through
:func:`counter`. On a terminal that is a tqdm bar redrawn in place; off one
(a log file, a pipe, CI), or without tqdm (the base install), it is a plain
line when the work starts, at each quarter and when it ends, never a
carriage return. A disabled counter says nothing (``--quiet``).

tqdm rather than rich: one small pure-Python wheel with no dependencies of
its own, where rich brings pygments and markdown-it for features cqopt does
not use; the base install (load charts, look plans up) stays small.

>>> import io
>>> out = io.StringIO()
>>> with counter("Q1", 8, "cells", stream=out) as done:
...     for _ in range(8):
...         done(1)
>>> print(out.getvalue(), end="")
  Q1: 0 of 8 cells
  Q1: 2 of 8 cells
  Q1: 4 of 8 cells
  Q1: 6 of 8 cells
  Q1: 8 of 8 cells
"""

from __future__ import annotations

import math
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TextIO


def _bar_class(stream: TextIO):
    """tqdm's bar when ``stream`` is a terminal and tqdm is installed (an extra: spark, all),
    else None: plain lines."""
    if not is_terminal(stream):
        return None
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm


def is_terminal(stream: TextIO) -> bool:
    """Whether ``stream`` is a terminal a bar may redraw."""
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # closed, or no isatty
        return False


def say(text: str, *, enabled: bool = True, stream: TextIO | None = None) -> None:
    """One step of the work, in a line of its own on stderr: the same words from the
    console and from Python (:mod:`cqopt.api`'s functions, whose ``progress=False``
    says nothing, as ``--quiet`` does).

    >>> import io
    >>> out = io.StringIO()
    >>> say("Q1: replaying 59 rounds", stream=out); say("not this", enabled=False, stream=out)
    >>> out.getvalue().splitlines()
    ['Q1: replaying 59 rounds']
    """
    if enabled:
        print(text, file=stream if stream is not None else sys.stderr, flush=True)


@contextmanager
def counter(label: str, total: int, unit: str, *, enabled: bool = True,
            stream: TextIO | None = None) -> Iterator[Callable[[int], None]]:
    """Counted work: yields ``done(n)``, to call as each ``n`` more units finish.

    Parameters
    ----------
    label : str
        What is being worked on (a query's name, "Spark").
    total : int
        The units of work in all.
    unit : str
        What a unit is, plural ("cells", "rounds", "tasks").
    enabled : bool
        False says nothing (``--quiet``).
    stream : file, optional
        Where to say it (default stderr).

    Yields
    ------
    callable
        ``done(n)``: ``n`` more units finished. Safe to call from another thread.
    """
    stream = stream if stream is not None else sys.stderr
    lock = threading.Lock()
    if not enabled or total <= 0:
        yield lambda n: None
        return
    tqdm = _bar_class(stream)
    if tqdm is not None:
        with tqdm(total=total, desc=f"  {label}", unit=f" {unit}", file=stream,
                  leave=True, dynamic_ncols=True) as bar:
            def advance(n: int) -> None:
                with lock:
                    bar.update(n)
            yield advance
        return
    state = {"done": 0, "quarter": -1}

    def advance(n: int) -> None:
        with lock:
            state["done"] = min(total, state["done"] + n)
            quarter = 4 * state["done"] // total
            if quarter != state["quarter"]:
                state["quarter"] = quarter
                print(f"  {label}: {state['done']:,} of {total:,} {unit}", file=stream,
                      flush=True)
    advance(0)
    yield advance


@contextmanager
def heartbeat(label: str, poll: Callable[[], tuple[int, int]] | None, unit: str, *,
              enabled: bool = True, stream: TextIO | None = None,
              every_s: float = 5.0, poll_s: float = 0.5) -> Iterator[None]:
    """Work whose progress only a poll can tell (a Spark job): said while the block runs.

    ``poll()`` returns ``(done, total)`` units so far; without ``poll`` (a wait
    nothing can count, such as a JVM starting) the time alone is said. On a
    terminal it is a bar redrawn as they change; off one, a line after
    ``every_s`` seconds and then every ``every_s``, so that no wait is silent
    for long.

    >>> import io
    >>> out = io.StringIO()
    >>> with heartbeat("Spark", lambda: (3, 4), "tasks", stream=out, every_s=0.05, poll_s=0.01):
    ...     time.sleep(0.1)
    >>> out.getvalue().splitlines()[0]
    '  Spark: 3 of 4 tasks done, 0 s'
    """
    if not enabled:
        yield
        return
    stream = stream if stream is not None else sys.stderr
    tqdm = _bar_class(stream)
    stop = threading.Event()
    began = time.monotonic()

    def watch() -> None:
        bar = None
        said = time.monotonic() if poll is None else -math.inf
        while not stop.wait(poll_s):
            now = time.monotonic()
            if poll is None:
                if now - said >= every_s:
                    said = now
                    print(f"  {label}: still {unit}, {now - began:.0f} s", file=stream,
                          flush=True)
                continue
            try:
                done, total = poll()
            except Exception:  # a poll that fails (the job ended under it) says nothing
                continue
            if tqdm is not None:
                if bar is None:
                    bar = tqdm(total=total, desc=f"  {label}", unit=f" {unit}", file=stream,
                               leave=False, dynamic_ncols=True)
                bar.total, bar.n = max(total, 1), done
                bar.refresh()
            elif now - said >= every_s:
                said = now
                progress = (f"{done:,} of {total:,} {unit} done" if total else
                            "waiting for its first tasks to start")
                print(f"  {label}: {progress}, {now - began:.0f} s", file=stream, flush=True)
        if bar is not None:
            bar.close()

    thread = threading.Thread(target=watch, name=f"cqopt-progress-{label}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
