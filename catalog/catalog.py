"""The stream catalog: streams, their columns and widths, operator profiles.

A catalog is a TOML file::

    time_unit = "seconds"              # or "milliseconds": the unit of PIPES' d, l, g

    [operators]                        # processing rates, tuples/s (OM's tpr)
    selection_equality = 400000
    selection_range = 200000
    projection = 500000
    equi_join = 3000
    aggregate = 100000

    [pipes]                            # PIPES cost constants, seconds per operation
    predicate = 1e-7                   # C_P ...

    [engine]                           # the engine model's seconds per job, tuple, ...
    job = 0.3                          # (cqopt calibrate --from-run fits them)

    [join_strategies]                  # the engine model's costs of a hinted join's steps
    exchange = 1e-6                    # seconds per tuple shuffled, ...

    [types]                            # optional: override a type's width in bytes
    int = 4

    [streams.TCP]
    rate = [100, 1000]                 # arrival-rate range [lo, hi], tuples/s
    granularity = 1e-6                 # optional source time granularity, time units
    columns = { ts = "timestamp", src_host = "int", bytes = { type = "long", width = 4 } }

Column types and their default widths in bytes: ``int`` 4, ``long`` 8,
``double`` 8, ``bool`` 1, ``timestamp`` 8, ``string(n)`` n. A column may
override its width with ``{ type = ..., width = ... }`` and may declare its
number of distinct values, ``{ type = "int", distinct = 1000 }``: the default
selectivity of an equi-join on it is then 1 / max(distinct of the two
columns), the textbook estimate (see
:func:`cqopt.optimizer.query.statistics.default_source`).

The aggregate processing rate is not measured by the OM paper. We default it
to 100,000 tuples/s: an aggregate reads every tuple once like a selection and
updates one accumulator (a hash probe with GROUP BY), so it is slower than a
range selection (200,000) but far from a join's per-tuple window scan (3,000).

>>> cat = Catalog.from_dict({"streams": {"S": {"rate": [1, 10], "columns": {"a": "int"}}}})
>>> cat.stream("s").width, cat.operators.equi_join
(4, 3000.0)
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import tomllib
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from cqopt.catalog.errors import CatalogError
from cqopt.errors import did_you_mean, read_text_file

TYPE_WIDTHS: dict[str, int] = {
    "int": 4, "long": 8, "double": 8, "bool": 1, "timestamp": 8,
}
NUMERIC_TYPES = frozenset({"int", "long", "double", "timestamp"})
# The largest arrival rate cqopt takes, in tuples/s, in a catalog or as a statistic: a
# million times the fastest link's packet rate, and far enough below the float range
# that sums and products of rates over a window (estimators, cost models) stay finite.
MAX_RATE = 1e15
TIME_UNITS: dict[str, float] = {"seconds": 1.0, "milliseconds": 1e-3}
_STRING_TYPE = re.compile(r"string\((\d+)\)")
_TYPE_FORM = "one of int, long, double, bool, timestamp, string(n)"


@dataclass(frozen=True)
class Column:
    name: str
    type: str  # int, long, double, bool, timestamp or string
    width: int  # bytes
    distinct: int | None = None  # number of distinct values, if declared

    @property
    def is_numeric(self) -> bool:
        return self.type in NUMERIC_TYPES


def find_column(columns: Iterable[Column], name: str) -> Column | None:
    """The column of ``columns`` called ``name``, compared case-insensitively, or None."""
    low = name.lower()
    return next((c for c in columns if c.name.lower() == low), None)


@dataclass(frozen=True)
class Stream:
    name: str
    columns: tuple[Column, ...]
    rate: tuple[float, float]  # arrival-rate range [lo, hi], tuples/s
    granularity: float | None = None  # source time granularity, catalog time units

    def column(self, name: str) -> Column | None:
        """The column called ``name`` (case-insensitive), or None."""
        return find_column(self.columns, name)

    @property
    def width(self) -> int:
        """Bytes of one tuple: the sum of its column widths."""
        return sum(c.width for c in self.columns)


@dataclass(frozen=True)
class OperatorRates:
    """OM's tuple processing rates (tpr), tuples/s, per processing-rate class.

    Defaults are the OM paper's measurements; ``aggregate`` is ours (see the
    module docstring). A theta join runs at the ``equi_join`` rate.
    """

    selection_equality: float = 400_000.0
    selection_range: float = 200_000.0
    projection: float = 500_000.0
    equi_join: float = 3_000.0
    aggregate: float = 100_000.0

    def rate(self, rate_class: str) -> float:
        """The rate of a class named as in plans: ``selection-equality`` or ``selection_equality``."""
        return getattr(self, rate_class.replace("-", "_"))


@dataclass(frozen=True)
class PipesConstants:
    """PIPES' per-operation costs (seconds each) and hash-table buckets.

    Symbols are those of the PIPES paper (seed 002, section 3.5 and tables 1-2).
    The paper gives no values; the defaults are of the order of a modern CPU's
    cost for each step, so that CPU figures have a realistic scale.
    """

    predicate: float = 2e-8  # C_P: one evaluation of a selection or join predicate
    projection_function: float = 1e-8  # C_F: one projection / result composition
    append: float = 5e-9  # C_T: append an element to an output stream
    set_timestamp: float = 5e-9  # C_S: set a timestamp (window operator)
    queue: float = 1e-8  # C_Q: enqueue or dequeue (tuple-based window)
    bucket: float = 2e-8  # C_B: insert into / remove from a hash bucket
    hash: float = 1e-8  # C_H: one call of the hash function
    expire: float = 5e-9  # C_E: one expiration-predicate call
    heap: float = 5e-8  # C_R: restructure the heap after insert/remove of its top
    round_timestamp: float = 5e-9  # C_R of the granularity operator: round a timestamp
    update_aggregate: float = 1e-8  # C_U
    init_aggregate: float = 2e-8  # C_I
    overlap: float = 5e-9  # C_O: temporal-overlap check of two elements
    list_op: float = 1e-8  # C_L: append or remove-first on a list
    hash_buckets: int = 1024  # #B: buckets of each join hash table


@dataclass(frozen=True)
class EngineConstants:
    """The engine model's costs: seconds of the engine's time per unit of work.

    :mod:`cqopt.costmodel.engine` reads them. The defaults are of the order
    Spark ``local[2]`` showed for the example's plans (a job of a few hundred
    ms, tuples at about a microsecond); ``cqopt calibrate --from-run`` fits
    them to a run's measured plan times.
    """

    job: float = 0.3  # one plan run: scheduling a job, its tasks, writing its result
    scan: float = 1e-6  # per tuple a source reads
    selection: float = 1e-7  # per tuple a selection reads
    projection: float = 5e-8  # per tuple a projection reads
    join: float = 0.1  # per join: one shuffle stage
    join_input: float = 1e-6  # per tuple into a join (hashing, shuffling, building)
    join_output: float = 5e-7  # per tuple a join emits
    aggregate: float = 5e-7  # per tuple into the aggregate


@dataclass(frozen=True)
class JoinStrategyConstants:
    """The engine model's costs of a join's own steps when a hint fixes its strategy.

    :func:`cqopt.costmodel.engine.strategy_join_seconds` reads them (a join
    left to the engine is costed with :class:`EngineConstants`' ``join`` terms).
    Seconds of a ``local[2]`` round per unit. Where the defaults come from:
    Spark's own costs of each step, of the order one sees on a laptop core
    for rows of a few ints, held so that the per-tuple figures line up with
    :class:`EngineConstants`' ``join_input`` (1 µs a tuple into a join):

    - ``stage``: a shuffle adds a stage (a map stage writing shuffle files, a
      reduce stage fetching them): its tasks' scheduling and the files' set-up,
      of the order of :class:`EngineConstants`' ``join`` (0.1 s);
    - ``exchange``: per tuple shuffled: encoded as an UnsafeRow, hash
      partitioned, written to and fetched from a local shuffle file (Spark
      shuffles a few million small rows a second per core);
    - ``build`` and ``probe``: per tuple inserted into, or looked up in, a
      join's hash table (Spark's ``BytesToBytesMap``: some 100 ns an insert);
    - ``sort``: per tuple per ``log2`` of the tuples sorted (Spark's
      ``UnsafeExternalSorter``: 1M rows in about 0.2 s, 20 levels);
    - ``broadcast``: a broadcast's fixed cost: a job of its own that collects
      the built side, and the torrent broadcast's set-up (tens of ms);
    - ``collect``: per built tuple: sent to the driver, which builds the
      hashed relation on one thread (so about twice a shuffled tuple's);
    - ``ship``: per built tuple and per executor it reaches: the torrent
      broadcast's blocks serialised, fetched and read back;
    - ``executors``: executors a broadcast reaches (``local[N]`` has one);
    - ``broadcast_limit``: bytes past which Spark refuses to broadcast
      (``BroadcastExchangeExec``'s 8 GiB): costed as infinite.
    """

    stage: float = 0.1  # per shuffle: one more stage of tasks
    exchange: float = 1e-6  # per tuple shuffled
    build: float = 2e-7  # per tuple into a hash table
    probe: float = 1e-7  # per tuple looked up (or merged)
    sort: float = 1e-8  # per tuple per log2 of the tuples sorted
    broadcast: float = 0.03  # per broadcast: the collecting job and the broadcast's set-up
    collect: float = 2e-6  # per built tuple collected to the driver and hashed there
    ship: float = 2e-7  # per built tuple per executor
    executors: int = 1  # executors a broadcast reaches
    broadcast_limit: float = 8.0 * 2 ** 30  # bytes: Spark broadcasts no more


@dataclass(frozen=True)
class Catalog:
    streams: dict[str, Stream]
    operators: OperatorRates = field(default_factory=OperatorRates)
    pipes: PipesConstants = field(default_factory=PipesConstants)
    engine: EngineConstants = field(default_factory=EngineConstants)
    join_strategies: JoinStrategyConstants = field(default_factory=JoinStrategyConstants)
    time_unit: str = "seconds"
    source: str = "<catalog>"

    def stream(self, name: str) -> Stream | None:
        """The stream called ``name`` (case-insensitive), or None."""
        low = name.lower()
        return next((s for n, s in self.streams.items() if n.lower() == low), None)

    @property
    def seconds_per_time_unit(self) -> float:
        return TIME_UNITS[self.time_unit]

    def to_dict(self) -> dict[str, Any]:
        """The catalog as data that :meth:`from_dict` reads back to an equal catalog."""
        return {
            "time_unit": self.time_unit,
            "operators": asdict(self.operators),
            "pipes": asdict(self.pipes),
            "engine": asdict(self.engine),
            # only where set: a catalog without them reads back in a cqopt without them
            **({"join_strategies": asdict(self.join_strategies)}
               if self.join_strategies != JoinStrategyConstants() else {}),
            "streams": {
                n: {"rate": list(s.rate),
                    **({"granularity": s.granularity} if s.granularity else {}),
                    "columns": {c.name: {"type": c.type if c.type != "string"
                                         else f"string({c.width})", "width": c.width,
                                         **({"distinct": c.distinct} if c.distinct else {})}
                                for c in s.columns}}
                for n, s in self.streams.items()
            },
        }

    def fingerprint(self) -> str:
        """A stable hash of everything that matters to costs (not the file's path).

        >>> a = Catalog.from_dict({"streams": {"S": {"rate": [1, 2], "columns": {"a": "int"}}}})
        >>> b = Catalog.from_dict({"streams": {"S": {"rate": [1.0, 2], "columns": {"a": "int"}}}}, "x")
        >>> a.fingerprint() == b.fingerprint()
        True
        """
        content = {
            "time_unit": self.time_unit,
            "operators": asdict(self.operators),
            "pipes": asdict(self.pipes),
            # The engine's constants only where set: catalogs without them keep the
            # fingerprint (and the chart sets built from them) they had before.
            **({"engine": asdict(self.engine)} if self.engine != EngineConstants() else {}),
            **({"join_strategies": asdict(self.join_strategies)}
               if self.join_strategies != JoinStrategyConstants() else {}),
            "streams": {n: _undeclared_dropped(asdict(s))
                        for n, s in sorted(self.streams.items())},
        }
        blob = json.dumps(content, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str = "<catalog>") -> Catalog:
        """Validate a parsed catalog; every error names ``source`` and the key path."""
        return _Loader(source).catalog(data)


def load_catalog(path: str | Path) -> Catalog:
    """Read and validate a TOML catalog file.

    Parameters
    ----------
    path : str or Path
        A catalog TOML file (see the module docstring for its keys).

    Returns
    -------
    Catalog

    Raises
    ------
    CatalogError
        The file is missing, unreadable, not TOML, or invalid; the message
        names the file and the key.

    Examples
    --------
    >>> from cqopt.examples import example
    >>> cat = load_catalog(example("dec-pkt.toml"))
    >>> sorted(cat.streams)
    ['SF', 'TCP', 'UDP']
    """
    path = Path(path)
    try:
        data = tomllib.loads(read_text_file(path))
    except FileNotFoundError:
        raise CatalogError(str(path), "", "no such file", "a path to a catalog TOML file") from None
    except (OSError, UnicodeDecodeError) as err:
        raise CatalogError(str(path), "", f"cannot read the file: {err}") from None
    except tomllib.TOMLDecodeError as err:
        raise CatalogError(str(path), "", f"not valid TOML: {err}") from None
    return Catalog.from_dict(data, str(path))


class _Loader:
    """Validation of a catalog's parsed TOML, one method per table."""

    def __init__(self, source: str):
        self.source = source

    def fail(self, key: str, problem: str, expected: str | None = None) -> CatalogError:
        return CatalogError(self.source, key, problem, expected)

    def table(self, value: Any, key: str) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(key, f"must be a table, got {_kind(value)}", f"[{key}]")
        return value

    def no_unknown(self, table: dict[str, Any], known: set[str] | list[str], key: str) -> None:
        for name in table:
            if name not in known:
                where = f"{key}.{name}" if key else name
                raise self.fail(where, f"unknown key{did_you_mean(name, known)}",
                                "one of " + ", ".join(sorted(known)))

    def positive(self, value: Any, key: str, integer: bool = False) -> float:
        ok = isinstance(value, int) if integer else isinstance(value, (int, float))
        if isinstance(value, bool) or not ok or not math.isfinite(value) or value <= 0:
            kind = "integer" if integer else "number"
            raise self.fail(key, f"must be a positive {kind}, got {value!r}", f"a {kind} > 0")
        return value if integer else float(value)

    def catalog(self, data: dict[str, Any]) -> Catalog:
        self.no_unknown(data, {"time_unit", "operators", "pipes", "engine", "join_strategies",
                               "types", "streams"}, "")
        time_unit = data.get("time_unit", "seconds")
        if time_unit not in TIME_UNITS:
            raise self.fail("time_unit", f"unknown time unit {time_unit!r}",
                            " or ".join(f"'{u}'" for u in TIME_UNITS))
        widths = self.type_widths(self.table(data.get("types", {}), "types"))
        streams_table = self.table(data.get("streams", {}), "streams")
        if not streams_table:
            raise self.fail("streams", "the catalog defines no stream",
                            "at least one [streams.NAME] table")
        streams = {name: self.stream(name, spec, widths) for name, spec in streams_table.items()}
        lowered = [n.lower() for n in streams]
        for name in streams:
            if lowered.count(name.lower()) > 1:
                raise self.fail(f"streams.{name}", "stream names differ only in case",
                                "names unique regardless of case")
        return Catalog(
            streams=streams,
            operators=self.constants(OperatorRates, data.get("operators", {}), "operators"),
            pipes=self.constants(PipesConstants, data.get("pipes", {}), "pipes"),
            engine=self.constants(EngineConstants, data.get("engine", {}), "engine"),
            join_strategies=self.constants(JoinStrategyConstants,
                                           data.get("join_strategies", {}), "join_strategies"),
            time_unit=time_unit,
            source=self.source,
        )

    def type_widths(self, table: dict[str, Any]) -> dict[str, int]:
        self.no_unknown(table, set(TYPE_WIDTHS), "types")
        widths = dict(TYPE_WIDTHS)
        for name, width in table.items():
            widths[name] = int(self.positive(width, f"types.{name}", integer=True))
        return widths

    def constants(self, cls: type, table: Any, key: str) -> Any:
        table = self.table(table, key)
        names = [f.name for f in fields(cls)]
        self.no_unknown(table, names, key)
        values = {}
        for f in fields(cls):
            if f.name in table:
                values[f.name] = self.positive(table[f.name], f"{key}.{f.name}",
                                               integer=f.type == "int")
        return cls(**values)

    def stream(self, name: str, spec: Any, widths: dict[str, int]) -> Stream:
        key = f"streams.{name}"
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise self.fail(key, "a stream name must be an identifier", "letters, digits, _")
        spec = self.table(spec, key)
        self.no_unknown(spec, {"rate", "granularity", "columns"}, key)
        if "rate" not in spec:
            raise self.fail(f"{key}.rate", "missing", "rate = [lo, hi] in tuples/s")
        rate = spec["rate"]
        if (not isinstance(rate, list) or len(rate) != 2
                or any(isinstance(r, bool) or not isinstance(r, (int, float)) for r in rate)):
            raise self.fail(f"{key}.rate", f"must be a pair of numbers, got {rate!r}",
                            "rate = [lo, hi] with 0 < lo < hi, tuples/s")
        lo, hi = (float(r) for r in rate)
        if not (0 < lo < hi <= MAX_RATE):
            raise self.fail(f"{key}.rate", f"needs 0 < lo < hi <= {MAX_RATE:g}, got "
                            f"[{lo:g}, {hi:g}]", "rate = [lo, hi] with 0 < lo < hi, tuples/s")
        granularity = spec.get("granularity")
        if granularity is not None:
            granularity = self.positive(granularity, f"{key}.granularity")
        columns_table = self.table(spec.get("columns", {}), f"{key}.columns")
        if not columns_table:
            raise self.fail(f"{key}.columns", "the stream has no column",
                            'columns = { name = "type", ... }')
        columns = tuple(self.column(f"{key}.columns.{c}", c, t, widths)
                        for c, t in columns_table.items())
        lowered = [c.name.lower() for c in columns]
        for c in columns:
            if lowered.count(c.name.lower()) > 1:
                # SQL identifiers are case-insensitive: S.a and S.A must be one column.
                raise self.fail(f"{key}.columns.{c.name}", "column names differ only in case",
                                "names unique regardless of case")
        return Stream(name, columns, (lo, hi), granularity)

    def column(self, key: str, name: str, spec: Any, widths: dict[str, int]) -> Column:
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise self.fail(key, "a column name must be an identifier", "letters, digits, _")
        width = distinct = None
        if isinstance(spec, dict):
            self.no_unknown(spec, {"type", "width", "distinct"}, key)
            if "width" in spec:
                width = int(self.positive(spec["width"], f"{key}.width", integer=True))
            if "distinct" in spec:
                distinct = int(self.positive(spec["distinct"], f"{key}.distinct", integer=True))
            spec = spec.get("type")
        if not isinstance(spec, str):
            raise self.fail(key, f"the column type must be a string, got {_kind(spec)}", _TYPE_FORM)
        type_name = spec.strip().lower()
        if match := _STRING_TYPE.fullmatch(type_name):
            length = int(match.group(1))
            if length <= 0:
                raise self.fail(key, "string(n) needs n > 0", "string(n) with n >= 1")
            return Column(name, "string", width or length, distinct)
        if type_name not in TYPE_WIDTHS:
            hint = did_you_mean(type_name, TYPE_WIDTHS)
            raise self.fail(key, f"unknown column type {spec!r}{hint}", _TYPE_FORM)
        return Column(name, type_name, width or widths[type_name], distinct)


def _undeclared_dropped(stream: dict[str, Any]) -> dict[str, Any]:
    """A stream's asdict without undeclared distinct counts: catalogs that declare none
    keep the fingerprint they had before columns could declare them."""
    stream["columns"] = [{k: v for k, v in c.items() if not (k == "distinct" and v is None)}
                         for c in stream["columns"]]
    return stream


def _kind(value: Any) -> str:
    return {dict: "a table", list: "an array", str: "a string"}.get(type(value), repr(value))
