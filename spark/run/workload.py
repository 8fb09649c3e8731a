"""A workload of continuous queries as one Structured Streaming query: read once, run together.

:class:`WorkloadRun` runs several queries of a workload in one Spark
application and **one streaming query**, over the union of every stream any
of them reads: each stream is read, and each micro-batch collected to the
driver, once. Each query keeps the rooms of a run of its own (an
:class:`~cqopt.spark.run.loop.AdaptiveRun` that never starts a streaming
query) in ``OUT/QUERY/``: its state, staging, round log, results and report,
as ``cqopt run --query QUERY`` writes them. Per micro-batch, each query takes
the batch's tuples of its own streams (:meth:`AdaptiveRun.open_batch`), so its
rounds are cut by its own window from its own start, complete when its own
streams have passed them, and its plans are chosen from its own chart at its
own rounds' statistics.

**One Spark job per micro-batch.** Without shadow timing or a deadline,
every query's rounds are grouped by the plan chosen for each
(:meth:`RoundRunner.group <cqopt.spark.run.rounds.RoundRunner.group>`). Where
every query's rounds are on the driver (a live micro-batch), all their plans
run as **one Spark SQL query** (:mod:`~cqopt.spark.run.joint_job`): each
plan's SQL over its rounds, every part tagged and put in typed slots, one
``UNION ALL`` over one view per stream of its distinct tuples (several
queries' equal tuples handed to Spark once), collected and split on the
driver, each query's rows then written per round into its scratch folder,
adopted and logged. It pays Spark's analysis and its fixed cost of a job
once instead of once per plan: on the ten-query bench
(``scripts/bench_workload.py``, ``local[2]``) a warm micro-batch took
0.54-0.59 s against 1.04-1.09 s with a job per plan. Equal queries over the
same tuples are one part. A query whose plan has no SQL form, or gave more
than :data:`~cqopt.spark.run.sink.LOCAL_RESULT_ROWS` rows (said; until a
micro-batch of at most half its tuples), leaves the joint job. Its plans,
every plan where Spark fails on the joint job (each, run alone, then says whose
failed), and every plan where rounds are too many to hold on the driver, are
built as DataFrames and run as Spark jobs of their own, from several driver
threads at once (:mod:`~cqopt.spark.run.concurrent`), each query's jobs in a
FAIR scheduler pool of its own, under
:data:`~cqopt.spark.session.DRIVER_DATA_CONF` for tuples on the driver. What
several of those plans share is computed once (:mod:`cqopt.spark.shared_work`):
Spark's block manager makes a job that needs a cached step another job is
computing wait for it, and plans that give one result run one job, its rows
copied into each query's scratch folder. With shadow timing or a deadline
each query runs its rounds as its own run does. A round's ``plan_seconds`` is
its share of the job that ran it (the joint job's time over every round in
it; the round log's ``joint_plans`` counts that job's plans, and
:mod:`cqopt.spark.engine_fit` leaves such rounds out).

**Overload bounds across queries.** Per micro-batch, every query's rounds are
observed and their plans chosen before any runs, then bounded together
(:mod:`~cqopt.spark.run.overload`): under ``memory_budget`` the windows of
all queries shrink by PIPES' rule when their chosen plans would hold more;
with ``deadline`` and ``negotiate`` their rounds are negotiated to one common
QoS level (RTStream), each query keeping that share of its input.

**Failures.** One query's failure in a micro-batch (a plan Spark cannot run)
is said, counted in ``OUT/state.json`` and the report, and the other queries
go on; the failed query's tuples are staged, so it tries its rounds again
with the next micro-batch.

**Restart safety.** ``OUT/checkpoint`` is the one streaming query's; each
query's folder holds its own state, so a killed run resumes every query at
its next unfinished round (a replayed micro-batch skips what each query ran).
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cqopt.errors import CqoptError
from cqopt.optimizer.plans.sql import PlanSqlError
from cqopt.output import write_atomic
from cqopt.spark.deferred import DeferredFrame
from cqopt.spark.run.concurrent import run_all
from cqopt.spark.run.joint_job import JointJob, JointPart
from cqopt.spark.run.loop import AdaptiveRun, OpenBatch, await_stream, start_stream
from cqopt.spark.run.overload import bound_batch
from cqopt.spark.run.report import RunResult, workload_markdown
from cqopt.spark.run.rounds import Grouped
from cqopt.spark.run.settings import TRIGGERS, RunSettings, StreamingRunError
from cqopt.spark.run.sink import LOCAL_RESULT_ROWS, write_json
from cqopt.spark.run.sources import Source, file_schema, read_stream
from cqopt.spark.run.staging import BatchHolder, release_batch
from cqopt.spark.run.state import STATE_VERSION, RunState
from cqopt.spark.session import driver_data_conf, spark_errors, spark_message
from cqopt.spark.shared_work import SharedWork

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from cqopt.catalog import Catalog
    from cqopt.charts.lookup import QueryChart
    from cqopt.optimizer.query.logical import ContinuousQuery

# Seconds between lines while a workload's reports are written (a hundred queries' take
# about 40 s: no silent wait after the last round, or after Ctrl-C).
REPORT_LINE_S = 5.0
# Names a query's folder cannot have: the workload's own files in OUT.
RESERVED = ("checkpoint", "state.json", "report.md", "report.json")


def check_output_names(names: list[str]) -> None:
    """Refuse queries whose folders under ``OUT`` would be one (``Q1`` and ``q1`` on a
    file system that ignores case, a query named twice) or the workload's own files.

    >>> check_output_names(["Q1", "Q2"])
    >>> check_output_names(["Q1", "q1"])
    Traceback (most recent call last):
    ...
    cqopt.spark.run.settings.StreamingRunError: queries Q1 and q1 would write one output folder (OUT/Q1 and OUT/q1 differ only in case); run them under different --out, or rename one in the workload
    """
    seen: dict[str, str] = {}
    for name in names:
        if name.lower() in RESERVED or name.startswith("."):
            raise StreamingRunError(f"query {name}: its output folder OUT/{name} would be the "
                                    "run's own file or a hidden one; rename it in the workload")
        other = seen.get(name.lower())
        if other is not None:
            why = ("is named twice" if other == name else
                   f"OUT/{other} and OUT/{name} differ only in case")
            raise StreamingRunError(f"queries {other} and {name} would write one output "
                                    f"folder ({why}); run them under different --out, or "
                                    "rename one in the workload")
        seen[name.lower()] = name


@dataclass
class WorkloadResult:
    """What a workload run did: each query's :class:`RunResult`, and failures per query."""

    out: Path
    results: dict[str, RunResult]
    failures: dict[str, int] = field(default_factory=dict)
    stopped_by: str = "end of input"


class WorkloadRun:
    """Several queries of a workload in one streaming query; see the module docstring.

    Parameters
    ----------
    spark : SparkSession
    queries : Mapping[str, tuple[ContinuousQuery, QueryChart]]
        Each query to run, by name: the parsed query and its chart.
    catalog : Catalog
    sources : Mapping[str, Source]
        One source per stream any query reads (each query takes its own).
    out : path
        The run's folder: new, empty, or one this workload ran in before (it resumes).
    settings : RunSettings
        Every query's settings (one trigger for all).
    progress : callable, optional
        Where a line of progress goes; default stderr.

    Raises
    ------
    StreamingRunError
        Two queries with one output folder, a stream no source gives, an
        ``out`` cqopt did not write or one another workload ran in.
    """

    def __init__(self, spark: SparkSession,
                 queries: Mapping[str, tuple[ContinuousQuery, QueryChart]],
                 catalog: Catalog, sources: Mapping[str, Source], out: str | Path,
                 settings: RunSettings = RunSettings(),
                 progress: Callable[[str], None] | None = None):
        say = progress or (lambda line: print(line, file=sys.stderr, flush=True))
        self.said_at = time.monotonic()

        def progress_line(line: str) -> None:
            self.said_at = time.monotonic()
            say(line)
        self.progress = progress_line
        self.spark, self.settings = spark, settings
        self.out = Path(out).absolute()
        check_output_names(list(queries))
        for name, (query, _) in queries.items():
            missing = [s for s in query.stream_names if s not in sources]
            if missing:
                raise StreamingRunError(f"no --source for stream {missing[0]}, which query "
                                        f"{name} reads; pass --source {missing[0]}=DIR")
        self.sources = {s: src for s, src in sources.items()
                        if any(s in q.stream_names for q, _ in queries.values())}
        self.state = RunState.open(self.out, {
            "version": STATE_VERSION, "workload": sorted(queries),
            "sources": {s: src.identity() for s, src in sorted(self.sources.items())}}, None)
        self.members = {name: AdaptiveRun(
            spark, name, query, chart, catalog,
            {s: self.sources[s] for s in query.stream_names}, self.out / name, settings,
            progress=progress_line) for name, (query, chart) in queries.items()}
        self.failures: dict[str, int] = dict(self.state.data.get("failures", {}))
        self.in_batch: int | None = None
        self.error: BaseException | None = None
        self.stop_requested = threading.Event()
        self.holder = BatchHolder()
        self.joint_job = JointJob(spark)
        # (query, plan) that the joint job does not take (said once each): no SQL form, or
        # more rows than the driver takes
        self.alone_plans: set[tuple[str, str]] = set()
        # (query, plan) -> the query's tuples of the micro-batch in which the plan gave more
        # rows than the driver takes: it comes back to the joint job in one of half as many
        # (a backlog's first batch then live rounds), not on every smaller batch
        self.overflowed_at: dict[tuple[str, str], int] = {}
        self._batch_shared = False  # whether this micro-batch's joint job shared anything
        self.stopped_by = "end of input"
        self.name = "workload"

    def _readers(self, stream: str) -> list[AdaptiveRun]:
        return [m for m in self.members.values() if stream in m.ctx.streams]

    @property
    def joint(self) -> bool:
        """Whether each micro-batch's plans run as one job (no shadow timing or deadline)."""
        return not self.settings.shadow and self.settings.deadline is None

    # -- the streaming query ----------------------------------------------------------
    def run(self) -> WorkloadResult:
        """Run every query until the input ends, every query's ``max_rounds``, or Ctrl-C.

        Returns
        -------
        WorkloadResult
            Per query its rounds and report; ``OUT/report.md`` holds a section each.

        Raises
        ------
        StreamingRunError
            A source Spark refuses or that does not fit the catalog, or a
            failure of the streaming query itself (one line).
        """
        if all(m._reached_max() for m in self.members.values()):
            self.stopped_by = "max rounds reached before"
            return self.report()
        frames = []
        for stream, source in self.sources.items():
            readers = self._readers(stream)
            if source.path is not None:  # every query's columns checked against the files
                for member in readers[1:]:
                    file_schema(member.ctx, source)
            frames.append(read_stream(readers[0].ctx, source))
        with spark_errors("Spark cannot start the workload's streaming query",
                          StreamingRunError):
            handle = start_stream(frames, self._batch, self.out, self.name,
                                  self.settings.trigger)
        await_stream(handle, self, self.name)
        if self.error is not None:
            raise self.error
        if self.settings.trigger in TRIGGERS and not self.stop_requested.is_set():
            self._finish_inputs()
        return self.report()

    def _say_waiting(self, began: float) -> None:
        """A line after 5 s without one before the first round, then after 30 s."""
        quiet = time.monotonic() - self.said_at
        done = sum(m.next_round for m in self.members.values())
        if quiet < (5.0 if not done else 30.0):
            return
        what = (f"working on micro-batch {self.in_batch}" if self.in_batch is not None else
                "waiting for input")
        self.progress(f"{self.name}: {what}: {done} rounds run so far by "
                      f"{len(self.members)} queries, {time.monotonic() - began:.0f} s in")

    # -- one micro-batch ----------------------------------------------------------------
    def _batch(self, batch: DataFrame, batch_id: int) -> None:
        stopping = self.stop_requested.is_set()
        self.in_batch = batch_id
        held = None
        try:
            with spark_errors(f"Spark failed on micro-batch {batch_id} of the workload",
                              StreamingRunError):
                held, local = self.holder.hold(batch)  # every stream, once
            batch = held
            opened = self._open(batch, local, batch_id)
            self._run_rounds({n: (o.tagged, batch_id, o.complete, o.local)
                              for n, o in opened.items()})
            for name, batch_open in opened.items():
                self._guard(name, batch_id, self.members[name].close_batch, batch_open)
            if all(m._reached_max() for m in self.members.values()):
                self.stop_requested.set()
        except BaseException as err:
            if not stopping:
                self.error = self.error or err
            self.stop_requested.set()
            raise
        finally:
            release_batch(held)
            self.in_batch = None

    def _open(self, batch: DataFrame, local, batch_id: int) -> dict[str, OpenBatch]:
        """Each query not done takes the batch's tuples of its streams."""
        import pyarrow as pa
        import pyarrow.compute as pc
        from pyspark.sql import functions as F

        opened = {}
        taken_by: dict[tuple[str, ...], tuple] = {}  # queries of one set of streams: one take
        for name, member in self.members.items():
            if member._reached_max():
                continue
            streams = tuple(sorted(member.ctx.streams))
            if streams not in taken_by:
                taken_by[streams] = (
                    DeferredFrame(lambda streams=streams: batch.where(
                        F.col("_stream").isin(list(streams)))),
                    None if local is None else
                    local.filter(pc.is_in(local["_stream"], pa.array(streams))))
            mine, own = taken_by[streams]
            taken = self._guard(name, batch_id, member.open_batch, mine, own, batch_id)
            if taken is not None:
                opened[name] = taken
        return opened

    def _guard(self, name: str, batch_id: int | None, step, *args) -> Any:
        """``step(*args)`` for query ``name``; its failure said and counted, not raised
        (unless the run is stopping: a stop interrupts Spark's jobs)."""
        try:
            with spark_errors(f"{name}: Spark failed on micro-batch {batch_id}",
                              StreamingRunError):
                return step(*args)
        except Exception as err:  # noqa: BLE001 - one query's failure; the others go on
            if self.stop_requested.is_set():
                raise
            text = str(err) if isinstance(err, CqoptError) else spark_message(err)
            self.failures[name] = self.failures.get(name, 0) + 1
            self.state.data["failures"] = self.failures
            self.state.save()
            self.progress(f"{name}: failed on micro-batch {batch_id} ({text}); its rounds are "
                          "tried again with the next micro-batch, the other queries go on "
                          f"(failure {self.failures[name]} of {name}, counted in the report)")
            return None

    def _run_rounds(self, work: Mapping[str, tuple]) -> None:
        """Each query's complete rounds: ``work`` is query -> RoundRunner.run's arguments.
        Every query's rounds are observed and chosen, then bounded together (a memory
        budget, a negotiated deadline: :func:`~cqopt.spark.run.overload.bound_batch`),
        then run jointly in one Spark job where :attr:`joint`, else each query's as its
        run does."""
        due = {}
        for name, args in work.items():
            made = self._guard(name, args[1], self.members[name].rounds.prepare, *args)
            if made is not None:
                due[name] = made
        bound_batch({name: self.members[name].rounds for name in due}, due)
        if not self.joint:
            for name, made in due.items():
                self._guard(name, made.batch_id, self.members[name].rounds.run_due, made)
            return
        counted = False  # the micro-batch counted in the shared totals by its joint job
        if due and all(made.local for made in due.values()):
            due, counted = self._run_joint(due)
            if not due:
                return
        shared = SharedWork()
        try:
            self._share(shared)
            grouped = self._group_all(due)
            if not grouped:
                return
            failed = self._run_together(grouped, shared, counted=counted)
        finally:
            self._share(None)
            shared.release()
        for name, made in grouped.items():
            if name in failed:  # said and counted as the query's failure
                self._guard(name, made.batch_id, _raise, failed[name])
            else:
                self._guard(name, made.batch_id, self.members[name].rounds.finish, made)

    def _run_joint(self, due: Mapping[str, Any]) -> tuple[dict[str, Any], bool]:
        """Every query's plans of rounds on the driver as one Spark SQL query
        (:class:`~cqopt.spark.run.joint_job.JointJob`), each plan's rounds written into its
        query's scratch folders, then adopted and logged. What is left to run each plan as
        its own job: the queries with a plan the joint job cannot take (one with no SQL
        form, or one that gave more rows than the driver takes: said, until a micro-batch
        of at most half those tuples), or every query when Spark fails on the joint job
        (run alone, the plans say whose failed); and whether a joint job ran (counted in
        the shared totals)."""
        grouped: dict[str, Grouped] = {}
        for name, made in due.items():
            made_groups = self._guard(name, made.batch_id, self.members[name].rounds.group,
                                      made, False)
            if made_groups is not None:
                grouped[name] = made_groups
        batch_id = next(iter(due.values())).batch_id
        alone: set[str] = set()  # queries whose plans run as jobs of their own
        parts, owners = [], []
        for name, made in grouped.items():
            query = self.members[name].ctx.query
            for index, (plan, rounds) in enumerate(zip(made.plans, made.groups)):
                part = JointPart(name, plan, query, made.tables, tuple(rounds),
                                 lone=len(made.outcomes) == 1)
                self._return_if_smaller(name, plan.id, grouped[name].tuples)
                if (name, plan.id) not in self.alone_plans:
                    try:
                        self.joint_job.plan_text(part)
                    except PlanSqlError as err:
                        self._alone(name, plan.id, f"{err}; its rounds run as their own "
                                                   "Spark job")
                if (name, plan.id) in self.alone_plans:
                    alone.add(name)
                parts.append(part)
                owners.append((name, made, index))
        joint = [i for i, (name, _, _) in enumerate(owners) if name not in alone]
        if not joint:
            return {name: due[name] for name in alone}, False
        try:
            # Compiling costs each part's stages; interpreting, each part's tuples.
            tuples = max(grouped[owners[i][0]].tuples or 0 for i in joint)
            with driver_data_conf(self.spark, True, tuples):
                result = self.joint_job.run([parts[i] for i in joint], LOCAL_RESULT_ROWS)
        except Exception as err:  # noqa: BLE001 - each plan alone says whose failed
            if self.stop_requested.is_set():
                raise
            self.progress(f"{self.name}: the joint job of micro-batch {batch_id} failed "
                          f"({spark_message(err)}); its plans run again, each alone")
            return {name: due[name] for name in grouped}, False
        for k in result.too_large:
            name, plan = parts[joint[k]].name, parts[joint[k]].plan
            alone.add(name)
            tuples = grouped[name].tuples or 0
            self.overflowed_at[(name, plan.id)] = tuples
            self._alone(name, plan.id, f"plan {plan.id} gave more than {LOCAL_RESULT_ROWS:,} "
                                       f"rows in micro-batch {batch_id} (of {tuples:,} "
                                       "tuples), more than the driver takes: its rounds run "
                                       "as their own Spark job, which writes its rows, until "
                                       f"a micro-batch holds at most {tuples // 2:,} tuples")
        ran = set(range(len(joint))) - set(result.same) - result.too_large
        per_round = result.seconds / max(1, sum(len(parts[joint[k]].rounds) for k in ran))
        failed = set(alone)
        for k, i in enumerate(joint):
            name, made, index = owners[i]
            if name in failed:
                continue
            if self._guard(name, made.batch_id, _written, made.write_rows, index,
                           result.tables[k], result.schemas[k], per_round,
                           result.parts) is None:
                failed.add(name)
        self._count_shared({"shared_steps": 0, "saved": 0, "shared_results": len(result.same),
                            **result.info}, joint=True)
        for name, made in grouped.items():
            if name not in failed:
                self._guard(name, made.batch_id, self.members[name].rounds.finish, made)
        return {name: due[name] for name in alone}, True

    def _return_if_smaller(self, name: str, plan_id: str, tuples: int | None) -> None:
        """A plan that gave too many rows comes back to the joint job (said) when the
        query's micro-batch holds at most half the tuples it gave them from."""
        at = self.overflowed_at.get((name, plan_id))
        if at is None or tuples is None or 2 * tuples > at:
            return
        del self.overflowed_at[(name, plan_id)]
        self.alone_plans.discard((name, plan_id))
        self.progress(f"{name}: plan {plan_id} runs in the workload's joint job again: "
                      f"micro-batch of {tuples:,} tuples, at most half the {at:,} it gave "
                      "too many rows from")

    def _alone(self, name: str, plan_id: str, why: str) -> None:
        """Plan ``plan_id`` of query ``name`` runs as a job of its own from now on: said."""
        self.alone_plans.add((name, plan_id))
        self.progress(f"{name}: {why}")

    def _group_all(self, due: Mapping[str, Any]) -> dict[str, Grouped]:
        """Every query's plans built (:meth:`RoundRunner.group
        <cqopt.spark.run.rounds.RoundRunner.group>`), from several driver threads at once:
        a plan's DataFrame is some hundred round trips to the JVM, which overlap there. A
        query whose plans cannot be built is said and counted, the others go on."""
        built: dict[str, Grouped] = {}

        def group(name: str) -> None:
            built[name] = self.members[name].rounds.group(due[name])
        names = list(due)
        for name, error in zip(names, run_all([lambda n=n: group(n) for n in names],
                                              pools=names)):
            if error is not None:
                if self.stop_requested.is_set():
                    raise error
                self._guard(name, due[name].batch_id, _raise, error)
        return {name: built[name] for name in names if name in built}

    def _share(self, shared: SharedWork | None) -> None:
        """Every query builds its plans through ``shared`` (None: each on its own)."""
        for member in self.members.values():
            member.rounds.shared = member.staging.shared = shared

    def _run_together(self, grouped: Mapping[str, Grouped], shared: SharedWork,
                      counted: bool = False) -> dict[str, BaseException]:
        """Every query's plans, each its own Spark job, side by side
        (:func:`~cqopt.spark.run.concurrent.run_all`), each plan's rounds written into its
        query's scratch folders; what several plans share computed once, and a result
        several queries' plans give (equal queries over equal tuples) one job, its rows
        copied to each. The first error of each query whose plans failed (its rounds are
        not finished)."""
        parts = [(name, made, index) for name, made in grouped.items()
                 for index in range(len(made.frames))]
        results = [id(made.frames[index]) for _, made, index in parts]  # equal: one object
        first: dict[int, tuple[str, Grouped, int]] = {}  # result -> the part that runs it
        for part, result in zip(parts, results):
            first.setdefault(result, part)
        # Rounds on the driver give jobs of a few hundred tuples per plan, each frame one
        # partition: run without stages that cost more than their work (DRIVER_DATA_CONF).
        local = all(made.local for made in grouped.values())
        with driver_data_conf(self.spark, local, max(made.tuples or 0 for made in
                                                     grouped.values()) if local else None):
            shared.compute_once()
            errors = dict(zip(first, run_all([lambda made=made, index=index: made.write(index)
                                              for _, made, index in first.values()],
                                             pools=[name for name, _, _ in first.values()])))
        self._count_shared(shared.summary(), counted=counted)
        copies = {i: first[result] for i, (part, result) in enumerate(zip(parts, results))
                  if first[result] is not part and errors[result] is None}
        copied = dict(zip(copies, run_all([
            lambda part=parts[i], runner=runner: part[1].copy(part[2], runner[1], runner[2])
            for i, runner in copies.items()])))
        failed: dict[str, BaseException] = {}
        for i, ((name, _, _), result) in enumerate(zip(parts, results)):
            error = errors[result] or copied.get(i)
            if error is not None:
                if self.stop_requested.is_set():
                    raise error
                failed.setdefault(name, error)
        return failed

    def _count_shared(self, summary: Mapping[str, int], joint: bool = False,
                      counted: bool = False) -> None:
        """Add what a micro-batch's plans shared to the run's totals (in the state: a resumed
        run goes on counting): steps and results of the memo, or, in a joint job, the
        tables of tuples handed to Spark once for several reads, and equal results.
        ``counted``: the micro-batch is counted already (its joint job), only its shares
        are added."""
        totals = self.state.data.setdefault("shared", {"jobs": 0, "jobs_sharing": 0,
                                                       "shared_steps": 0, "saved": 0})
        for key in ("shared_results", "joint_jobs", "reads", "tables"):
            totals.setdefault(key, 0)
        sharing = (summary["shared_steps"] > 0 or summary["shared_results"] > 0
                   or summary.get("reads", 0) > summary.get("tables", 0))
        totals["jobs"] += not counted
        totals["jobs_sharing"] += sharing and not (counted and self._batch_shared)
        self._batch_shared = sharing or (counted and self._batch_shared)
        totals["joint_jobs"] += joint
        for key in ("shared_steps", "saved", "shared_results", "reads", "tables"):
            totals[key] += summary.get(key, 0)
        self.state.save()

    def _finish_inputs(self) -> None:
        """The input has ended: every query's rounds up to its last tuple's run, jointly."""
        work = {}
        for name, member in self.members.items():
            if member._reached_max():
                continue
            stop = self._guard(name, None, member.input_ended)
            if stop is not None:
                work[name] = (None, None, stop, None)
        self._run_rounds(work)
        for name in work:
            self._guard(name, None, self.members[name].finished)

    def report(self) -> WorkloadResult:
        """Each query's report in its folder; ``OUT/report.md`` and ``report.json`` with a
        section per query, and the failures per query. A query's timeline takes some 0.4 s
        to draw, so a large workload's reports are said every :data:`REPORT_LINE_S` s."""
        results = {}
        began = said = time.monotonic()
        for done, (name, member) in enumerate(self.members.items(), 1):
            member.stopped_by = (member.stopped_by if member._reached_max() else
                                 self.stopped_by)
            results[name] = member.report()
            now = time.monotonic()
            if now - said >= REPORT_LINE_S and done < len(self.members):
                said = now
                self.progress(f"{self.name}: reports and timelines written for {done} of "
                              f"{len(self.members)} queries, {now - began:.0f} s")
        shared = self.state.data.get("shared")
        write_json(self.out / "report.json", {
            "queries": {n: r.summary for n, r in results.items()},
            "failures": self.failures, "stopped_by": self.stopped_by, "shared": shared})
        write_atomic(self.out / "report.md", workload_markdown(results, self.failures, shared))
        return WorkloadResult(self.out, results, dict(self.failures), self.stopped_by)


def _written(write, *args) -> bool:
    """``write(*args)``, True once done (a guard's None is a failure)."""
    write(*args)
    return True


def _raise(error: BaseException) -> None:
    """A query's plan failed on its thread: raised again under the query's guard."""
    raise error
