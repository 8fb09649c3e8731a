"""Option values the command line reads, checked as argparse reads them.

:func:`number` is every numeric option's ``type``: it reads the text with
:func:`cqopt.errors.parse_number` (ASCII digits only, finite, within the
option's bounds), so a bad value is one ``cqopt: error: argument --X: ...``
line before any work starts. :func:`dialect` and :func:`memory_size` do the
same for a sqlglot dialect name and a JVM memory size.

>>> number(low=0)("0.25"), number(integer=True, low=1)("3")
(0.25, 3)
>>> number(low=0)("nan")
Traceback (most recent call last):
...
argparse.ArgumentTypeError: 'nan': expected a number in ASCII digits, e.g. 0.5, 12 or 1e3
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Callable
from typing import Any

from cqopt.errors import CqoptError, did_you_mean, parse_number, shorten


def number(*, integer: bool = False, low: float | None = None, above: float | None = None,
           high: float | None = None) -> Callable[[str], float]:
    """An argparse ``type`` reading a number within the given bounds (see parse_number).

    Parameters
    ----------
    integer : bool
        A whole number (returned as an int).
    low, above, high : float, optional
        ``low <= x``, ``above < x``, ``x <= high``.

    Returns
    -------
    callable
        ``text -> number``, raising :class:`argparse.ArgumentTypeError`.
    """
    def read(text: str) -> float:
        try:
            return parse_number(text, "", integer=integer, low=low, above=above, high=high)
        except CqoptError as err:
            raise argparse.ArgumentTypeError(str(err)) from None

    read.__name__ = "whole number" if integer else "number"
    return read


# A count whose bounds a later judge knows (a chart's k: the grid it makes must fit in
# memory): read here only as ASCII digits, so "٥" or "1_0" is not a 5 or a 10.
whole_number = number(integer=True)


def dialect(text: str) -> str:
    """An argparse ``type``: a sqlglot dialect name, e.g. ``spark`` or ``duckdb``.

    Refuses what :func:`cqopt.optimizer.plans.sql.plan_sql` would, in its words,
    but as the command line is read (an empty name would be sqlglot's generic
    dialect, silently).

    >>> dialect("duckdb")
    'duckdb'
    """
    import sqlglot

    known = sorted(d.value for d in sqlglot.Dialects if d.value)
    if text.lower() not in known:
        raise CqoptError(f"unknown SQL dialect {shorten(text, 40)!r}"
                         f"{did_you_mean(text, known)}; sqlglot knows {', '.join(known)}")
    return text.lower()


# Spark's master URLs (SparkContext's own forms): local, local[N], local[*], local[N,F],
# local-cluster[N,C,M], spark://, yarn, k8s://, mesos://. Nothing with spaces or control
# characters.
_MASTER = re.compile(r"(local(\[(\*|[1-9][0-9]*)(,[1-9][0-9]*)?\])?|yarn|"
                     r"local-cluster\[[1-9][0-9]*,[1-9][0-9]*,[1-9][0-9]*\]|"
                     r"(spark|k8s|mesos)://[\x21-\x7e]+)")


def master(text: str) -> str:
    """An argparse ``type``: a Spark master URL, checked before Spark starts.

    >>> master("local[2]"), master("spark://host:7077")
    ('local[2]', 'spark://host:7077')
    """
    if not _MASTER.fullmatch(text):
        raise argparse.ArgumentTypeError(
            f"not a Spark master URL: {shorten(text, 40)!r}; expected local, local[N], "
            "local[*], spark://HOST:PORT, yarn or k8s://HOST:PORT")
    return text


# A JVM heap size as -Xmx reads it, which is how Spark passes spark.driver.memory to a
# local driver: a whole number and a unit (a bare number would be bytes, not MiB).
_MEMORY = re.compile(r"([1-9][0-9]{0,12})([kmgt])", re.IGNORECASE)
_UNIT_BYTES = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
MIN_DRIVER_MEMORY = 512 << 20  # Spark refuses a driver of less than 450 MiB


def byte_size(text: str) -> float:
    """An argparse ``type``: a size in bytes, a number with an optional unit (k, m, g, t:
    powers of 1024), e.g. ``100m``, ``2.5g`` or ``65536``.

    >>> byte_size("100m"), byte_size("65536")
    (104857600.0, 65536.0)
    >>> byte_size("-1k")
    Traceback (most recent call last):
    ...
    argparse.ArgumentTypeError: '-1k': expected a size > 0 such as 100m or 2g
    """
    body = text.strip().lower()
    unit = body[-1:] if body[-1:] in _UNIT_BYTES else ""
    try:
        value = parse_number(body[:-1] if unit else body, "", above=0)
    except CqoptError:
        raise argparse.ArgumentTypeError(f"{shorten(text, 40)!r}: expected a size > 0 such as "
                                         "100m or 2g") from None
    return float(value * (_UNIT_BYTES[unit] if unit else 1))


def with_parent(args: argparse.Namespace, option: str, parent: str, default: Any) -> Any:
    """The value of ``option`` (whose argparse default is None, so a given one shows), or
    ``default``; an ``option`` given without the ``parent`` it modifies is refused.

    >>> with_parent(argparse.Namespace(offset=None, interarrivals=None), "--offset",
    ...             "--interarrivals", 0.0)
    0.0
    >>> with_parent(argparse.Namespace(offset=5.0, interarrivals=None), "--offset",
    ...             "--interarrivals", 0.0)
    Traceback (most recent call last):
    ...
    cqopt.errors.CqoptError: --offset is given without --interarrivals, which it modifies; give --interarrivals too, or leave --offset out
    """
    value = getattr(args, option.lstrip("-").replace("-", "_"))
    if value is None or value is False:
        return default
    if getattr(args, parent.lstrip("-").replace("-", "_")) in (None, False):
        raise CqoptError(f"{option} is given without {parent}, which it modifies; give "
                         f"{parent} too, or leave {option} out")
    return value


def memory_size(text: str) -> str:
    """An argparse ``type``: a JVM memory size such as ``6g`` or ``512m``, that this
    machine has (checked here, or the JVM would fail with its own text).

    >>> memory_size("1g")
    '1g'
    >>> memory_size("lots")
    Traceback (most recent call last):
    ...
    argparse.ArgumentTypeError: 'lots': expected a size such as 512m or 6g (a whole number and k, m, g or t)
    """
    match = _MEMORY.fullmatch(text.strip())
    if match is None:
        raise argparse.ArgumentTypeError(f"{shorten(text, 40)!r}: expected a size such as 512m "
                                         "or 6g (a whole number and k, m, g or t)")
    size = int(match.group(1)) * _UNIT_BYTES[match.group(2).lower()]
    if size < MIN_DRIVER_MEMORY:
        raise argparse.ArgumentTypeError(f"{text!r}: Spark needs a driver of 512m or more")
    physical = _physical_memory()
    if physical and size > physical:
        raise argparse.ArgumentTypeError(f"{text!r}: more than this machine's "
                                         f"{physical / (1 << 30):.1f} GiB of memory")
    return text.strip()


def _physical_memory() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):  # not on this platform
        return None


def option_label(key: str) -> str:
    """The command-line option of a parameter: ``memory_unit`` is ``--memory-unit``.

    >>> option_label("memory_unit")
    '--memory-unit'
    """
    return "--" + key.replace("_", "-")


def option_text(args: argparse.Namespace, key: str) -> str:
    """An option as the command line gave it, for messages: ``--weights 0,0``.

    >>> option_text(argparse.Namespace(weights="0,0"), "weights")
    '--weights 0,0'
    """
    return f"{option_label(key)} {getattr(args, key)}"


def option_namer(args: argparse.Namespace | None = None, *, as_given: tuple[str, ...] = (),
                 **spelled: str) -> Callable[[str, Any], str]:
    """How a command's messages name a :mod:`cqopt.api` function's parameter: as its option
    and value (``--k 0``), the option spelled as in ``spelled`` where the parameter's name is
    not the option's, and as the command line gave it for the keys in ``as_given`` (the
    text of ``args``, not the numbers read from it).

    >>> name = option_namer(argparse.Namespace(weights="0,0"), as_given=("weights",),
    ...                     stats="--stat")
    >>> name("stats", "rate.X"), name("weights", [0.0, 0.0]), name("k_sweep", "2,0")
    ('--stat rate.X', '--weights 0,0', '--k-sweep 2,0')
    """
    def name(key: str, value: Any) -> str:
        if key in as_given:
            return option_text(args, key)
        return f"{spelled.get(key) or option_label(key)} {value}"

    return name


def pairs(items: list[str] | None, option: str) -> dict[str, str]:
    """``STREAM=VALUE`` options (repeatable) as a mapping, each checked for its ``=``.

    >>> pairs(["TCP=traces/TCP", "UDP=rate:200"], "--source")
    {'TCP': 'traces/TCP', 'UDP': 'rate:200'}
    >>> pairs(["TCP"], "--source")
    Traceback (most recent call last):
    ...
    cqopt.errors.CqoptError: --source 'TCP': expected STREAM=VALUE
    """
    out = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key or not value:
            raise CqoptError(f"{option} {item!r}: expected STREAM=VALUE")
        out[key] = value
    return out


def input_file(text: str) -> str:
    """An argparse ``type`` for a catalog or workload: the path, or the bundled example
    it names (``examples/dec-pkt.toml``) when no such file is here, said on stderr in
    one line (:func:`cqopt.examples.resolve`), so the help examples run from any folder.
    """
    from cqopt.examples import resolve

    path, note = resolve(text)
    if note:
        print(f"cqopt: {note}", file=sys.stderr)
    return path


class OldSpelling(argparse.Action):
    """An option's old spelling, kept unlisted for a release: it does what ``new`` does
    (stores, or with ``append`` appends, to the same ``dest``) and says so once, in one
    line on stderr, naming the spelling to use."""

    def __init__(self, option_strings, dest, *, new: str, append: bool = False, **kwargs):
        self.new, self.append, self.said = new, append, False
        super().__init__(option_strings, dest, help=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        if not self.said:
            self.said = True
            print(f"cqopt: warning: {option_string} is the old spelling of {self.new}, "
                  "which it does the same as; it goes in a later release", file=sys.stderr)
        if self.append:
            values = [*(getattr(namespace, self.dest, None) or []), values]
        setattr(namespace, self.dest, values)
