"""Each operator's rows and seconds in one plan's Spark job, from Spark's own SQL metrics.

RTStream profiles each operator's cost from execution (seed 000, section
4.1); Spark measures the same things as it runs a query: every physical
operator carries SQL metrics (rows out, and for some a time: a hash
aggregate's build, a shuffle's write, a hash join's build, a whole-stage
pipeline's duration). :func:`operator_records` walks the physical plan that
ran (through AQE's final plan and its query stages) and gives one
:class:`OperatorRecord` per operator: the engine model's term it belongs to
(:mod:`cqopt.costmodel.engine`: ``scan``, ``selection``, ``projection``,
``join``, ``aggregate``; ``""`` for an operator the model has no term for),
rows in, rows out and seconds.

**Which query execution.** The metrics live on the ``SparkPlan`` objects of
the ``QueryExecution`` that ran. A DataFrame's own ``queryExecution`` ran only
for actions that execute it as it is (``collect``, ``toArrow``); a write
(``df.write.format("noop")``, Parquet) or ``df.limit(n).toArrow()`` plans and
runs a new execution, and the DataFrame's own plan then holds zeros. So
:func:`profiled` registers a ``QueryExecutionListener`` (through py4j, the
callback server PySpark's ``foreachBatch`` uses too) for the duration of a
block: it receives every execution that finished in the block, whatever the
action, and the records are read from those. Spark delivers the listener's
events on its listener bus, after the action returns; :func:`profiled` waits
for the bus to drain before reading.

**Where the time is.** Spark fuses operators into whole-stage code
generation pipelines and times the pipeline (``duration``), not each
operator in it. Each record says which pipeline it ran in (``stage``), and
each pipeline is a record of its own (``operator="WholeStageCodegen"``, kind
``""``, its duration as seconds). An operator outside a pipeline that times
itself (a shuffle's write, a broadcast's collect and build) has those
seconds as its own; an operator inside one keeps its own timers (a hash
aggregate's build) as a part of the pipeline's. Spark's times are summed over
tasks (task seconds, not wall seconds), milliseconds or nanoseconds as each
metric is kept; a shuffle's fetch wait is left out (it is the reading
pipeline's time). :mod:`cqopt.spark.operator_fit` fits the engine model's
per-tuple constants on these pipelines and timed operators.

**Where the records go.** A run keeps the records of each round's plan
jobs in ``log/operators-RRRRRR.json`` of its folder (:func:`write_round_profiles`),
beside the round's ``log/round-RRRRRR.json`` whose plan seconds they
explain: ``{"round": R, "plans": {PLAN_ID: [record, ...]}}``, each record
as :meth:`OperatorRecord.to_dict` gives it. One file per round, written
whole (a scratch name, then a rename), so a killed run leaves whole rounds.

>>> r = OperatorRecord("selection", "Filter", 1000, 120, 0.0, 1)
>>> OperatorRecord.from_dict(r.to_dict()) == r
True
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cqopt.errors import CqoptError
from cqopt.output import write_atomic

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

# The file of a round's operator records, in a run folder.
PROFILE_GLOB = "log/operators-*.json"
PIPELINE = "WholeStageCodegen"
# Spark's node names (SparkPlan.nodeName, before any " (n)" or " name") by the engine
# model's term. A node not named here and not a pass-through has no term ("").
SCANS = ("Range", "LocalTableScan", "InMemoryTableScan", "Scan", "BatchScan", "FileScan",
         "RDDScan", "ExistingRDD", "Scan ExistingRDD", "Scan parquet", "Scan csv", "Scan json",
         "Scan orc", "Scan text")
KINDS = {"Filter": "selection", "Project": "projection", "HashAggregate": "aggregate",
         "ObjectHashAggregate": "aggregate", "SortAggregate": "aggregate",
         "BroadcastHashJoin": "join", "ShuffledHashJoin": "join", "SortMergeJoin": "join",
         "BroadcastNestedLoopJoin": "join", "CartesianProduct": "join"}
# Nodes that only carry tuples between stages: they take the kind of what consumes them.
CARRIERS = ("Exchange", "BroadcastExchange", "ShuffleExchange", "AQEShuffleRead",
            "ShuffleQueryStage", "BroadcastQueryStage", "ReusedExchange", "InputAdapter",
            "Sort", "ColumnarToRow", "CustomShuffleReader")
# Nodes that may be timed outside a pipeline: a shuffle's write, a broadcast's build.
BOUNDARIES = ("Exchange", "BroadcastExchange", "ShuffleExchange")
# Time metrics that are not the node's own work (a pipeline's time is its own record;
# a shuffle's fetch wait and remote requests are spent in the reading pipeline).
NOT_OWN_TIME = frozenset({"pipelineTime", "fetchWaitTime", "remoteReqsDuration",
                          "remoteMergedReqsDuration"})
TIME_UNITS = {"timing": 1e-3, "nsTiming": 1e-9}  # Spark's metric types, in seconds


class OperatorMetricsError(CqoptError):
    """A query execution's metrics cannot be read."""


@dataclass(frozen=True)
class OperatorRecord:
    """One physical operator of a plan's Spark job: rows and seconds.

    ``kind`` is the engine model's term (``scan``, ``selection``,
    ``projection``, ``join``, ``aggregate``, or ``""``: none); ``operator``
    Spark's node name; ``seconds`` its own time metrics summed over tasks (0
    where Spark times it only as a part of its pipeline); ``stage`` the
    whole-stage pipeline it runs in (None: none).
    """

    kind: str
    operator: str
    rows_in: int
    rows_out: int
    seconds: float
    stage: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> OperatorRecord:
        """The record of :meth:`to_dict`; a missing or mistyped field raises KeyError,
        TypeError or ValueError."""
        stage = data["stage"]
        return cls(str(data["kind"]), str(data["operator"]), int(data["rows_in"]),
                   int(data["rows_out"]), float(data["seconds"]),
                   None if stage is None else int(stage))


def operator_records(executed: Any, stage_offset: int = 0) -> list[OperatorRecord]:
    """The operator records of a query execution that ran (see the module docstring).

    Parameters
    ----------
    executed : DataFrame, or py4j ``QueryExecution`` or ``SparkPlan``
        What ran: a DataFrame whose own execution ran (after its
        ``collect`` or ``toArrow``), or an execution :func:`profiled` caught.
    stage_offset : int
        Added to Spark's pipeline ids, to keep those of several executions apart.

    Returns
    -------
    list of OperatorRecord
        Top-down, each pipeline's record before its operators.

    Examples
    --------
    With ``spark``: ``frame = spark.range(10).where("id < 3"); frame.collect();
    operator_records(frame)`` gives a scan of 10 rows and a selection of 10 rows
    in, 3 out, in one pipeline.
    """
    plan = _physical_plan(executed)
    records: list[OperatorRecord] = []
    _walk(plan, records, stage=None, consumer="", offset=stage_offset)
    return records


def _physical_plan(executed: Any) -> Any:
    from py4j.java_gateway import JavaObject

    if not isinstance(executed, JavaObject):  # a PySpark DataFrame
        executed = executed._jdf.queryExecution()
    if _class_name(executed) == "QueryExecution":
        executed = executed.executedPlan()
    return executed


def _walk(node: Any, out: list[OperatorRecord], stage: int | None, consumer: str,
          offset: int) -> int:
    """Append ``node``'s subtree's records to ``out``; return its rows out."""
    cls = _class_name(node)
    if cls == "AdaptiveSparkPlanExec":  # the final plan, once the query has run
        return _walk(node.executedPlan(), out, stage, consumer, offset)
    if cls.endswith("QueryStageExec"):
        return _walk(node.plan(), out, stage, consumer, offset)
    name = _base_name(str(node.nodeName()))
    metrics = _metrics(node)
    children = _children(node)
    if cls == "WholeStageCodegenExec":
        index = len(out)
        own = offset + int(node.codegenStageId())
        rows = sum(_walk(c, out, own, consumer, offset) for c in children)
        out.insert(index, OperatorRecord("", PIPELINE, rows, rows,
                                         metrics.get("pipelineTime", (0.0, 0))[0], own))
        return rows
    kind = _kind(name, cls)
    if name in CARRIERS or cls in ("ReusedExchangeExec",):
        kind = consumer if kind == "" else kind
    passes = kind if kind in ("join", "aggregate") else (
        consumer if name in CARRIERS else "")
    inner = None if name in BOUNDARIES else stage  # the map side is another pipeline
    index = len(out)
    rows_in = sum(_walk(c, out, inner, passes, offset) for c in children)
    rows_out = metrics.get("numOutputRows", (None, None))[1]
    if rows_out is None:
        written = metrics.get("shuffleRecordsWritten", (None, None))[1]
        rows_out = written if written is not None else rows_in
    if not children:
        rows_in = rows_out
    own = sum((seconds for key, (seconds, _) in metrics.items()
              if seconds is not None and key not in NOT_OWN_TIME), 0.0)
    if name not in ("InputAdapter", "AQEShuffleRead", "ColumnarToRow", "CustomShuffleReader"):
        out.insert(index, OperatorRecord(kind, name, int(rows_in), int(rows_out), own,
                                         None if name in BOUNDARIES else stage))
    return int(rows_out)


def _kind(name: str, cls: str) -> str:
    if name in KINDS:
        return KINDS[name]
    if name in SCANS or name.startswith("Scan ") or cls.endswith("ScanExec"):
        return "scan"
    return ""


def _metrics(node: Any) -> dict[str, tuple[float | None, int | None]]:
    """Each metric by its key: ``(seconds, None)`` for a time, ``(None, value)`` else."""
    found = {}
    entries = node.metrics().iterator()
    while entries.hasNext():
        entry = entries.next()
        metric = entry._2()
        kind, value = str(metric.metricType()), int(metric.value())
        found[str(entry._1())] = ((value * TIME_UNITS[kind], None) if kind in TIME_UNITS
                                  else (None, value))
    return found


def _children(node: Any) -> list[Any]:
    children = node.children()
    return [children.apply(i) for i in range(children.size())]


def _class_name(obj: Any) -> str:
    return str(obj.getClass().getSimpleName())


def _base_name(name: str) -> str:
    """``WholeStageCodegen (3)`` -> ``WholeStageCodegen``; ``Scan parquet x`` kept whole."""
    return name.split(" (")[0]


# -- catching what ran --------------------------------------------------------------------
@dataclass
class Profile:
    """The executions that finished inside a :func:`profiled` block, then their records."""

    executions: list[Any] = field(default_factory=list)
    records: list[OperatorRecord] = field(default_factory=list)


class _Listener:
    """A ``QueryExecutionListener`` in Python: keeps each successful execution."""

    def __init__(self, profile: Profile):
        self.profile = profile

    def onSuccess(self, func_name, execution, duration_ns):  # noqa: N802 (Java's names)
        self.profile.executions.append(execution)

    def onFailure(self, func_name, execution, exception):  # noqa: N802
        pass

    class Java:
        implements = ["org.apache.spark.sql.util.QueryExecutionListener"]


@contextmanager
def profiled(spark: SparkSession) -> Iterator[Profile]:
    """The operator records of every query Spark executes inside the block.

    The run loop wraps each plan's job: ``with profiled(spark) as profile:
    write the plan's result``, then ``profile.records`` (several executions,
    such as a ``limit`` and then a write, each keep their pipelines apart).
    Time the job inside the block: the listener's events are waited for and
    the plans read (some 50-100 ms of py4j calls for a three-way join) as
    the block ends.

    Raises
    ------
    OperatorMetricsError
        The listener cannot be registered, or the plan not read.
    """
    from pyspark.java_gateway import ensure_callback_server_started

    from cqopt.spark.session import spark_errors

    profile = Profile()
    listener = _Listener(profile)
    with spark_errors("Spark's query listener could not be set up", OperatorMetricsError):
        ensure_callback_server_started(spark.sparkContext._gateway)
        manager = spark._jsparkSession.listenerManager()
        manager.register(listener)
    try:
        yield profile
        spark.sparkContext._jsc.sc().listenerBus().waitUntilEmpty()
    finally:
        manager.unregister(listener)
    with spark_errors("Spark's operator metrics could not be read", OperatorMetricsError):
        for i, execution in enumerate(profile.executions):
            profile.records += operator_records(execution, stage_offset=1000 * i)


def write_round_profiles(run: str | Path, round_index: int,
                         plans: Mapping[str, Sequence[OperatorRecord]]) -> Path:
    """Write a round's operator records per plan to ``log/operators-RRRRRR.json`` of ``run``.

    >>> import tempfile
    >>> run = Path(tempfile.mkdtemp())
    >>> path = write_round_profiles(run, 3, {"P1": [OperatorRecord("scan", "Range", 5, 5, 0.0)]})
    >>> path.name, read_round_profiles(path)["P1"][0].rows_out
    ('operators-000003.json', 5)
    """
    path = Path(run) / "log" / f"operators-{round_index:06d}.json"
    data = {"round": int(round_index),
            "plans": {plan: [r.to_dict() for r in records] for plan, records in plans.items()}}
    return write_atomic(path, json.dumps(data, indent=1) + "\n")


def read_round_profiles(path: str | Path) -> dict[str, list[OperatorRecord]]:
    """A round's operator records per plan, as :func:`write_round_profiles` wrote them.

    Raises
    ------
    OperatorMetricsError
        Not such a file.
    """
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        return {str(plan): [OperatorRecord.from_dict(r) for r in records]
                for plan, records in data["plans"].items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
        raise OperatorMetricsError(f"{path}: not a file of operator records "
                                   f"({type(err).__name__}: {err}); remove it or rerun the "
                                   "round") from None
