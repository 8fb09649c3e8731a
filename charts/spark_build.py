"""Building charts on Spark: every cell of every chart is one row of one job.

The job, and why it is shaped this way:

1. **Driver.** Each chart's :class:`~charts.build.ChartContext` (plans,
   model, utility) is built first, so a bad query, model or weights fails
   here as in the local engine, not as an executor traceback. The charts'
   cells are then laid end to end: chart ``c`` owns the global row ids
   ``offsets[c] <= id < offsets[c + 1]``, and its local flat (C-order) cell
   is ``id - offsets[c]``.
2. **Rows.** ``spark.range(total_cells, numPartitions=P)`` makes one row per
   cell of ALL charts, in P contiguous id slices (P: enough tasks for every
   core a few times over, never thousands of tiny ones). Contiguous slices
   keep most Arrow batches inside one or two charts.
3. **Kernel.** ``mapInArrow`` hands each Arrow batch of ids to
   :func:`_cost_batches`, which maps ids to (chart, cell) with
   ``searchsorted`` on the offsets, groups the rows by chart with numpy and
   calls the same kernel as the local engine,
   :func:`charts.build.evaluate_cells`, once per chart per batch. No per-row
   Python UDF. The shipped function captures plain data only (spec dicts,
   the catalog dict, the offsets, the expected plan ids), so cloudpickle
   ships it anywhere; each Python worker rebuilds a chart's context the
   first time it sees the chart and caches it for the rest of the job.
4. **Result.** The (chart int32, cell int64, plan int32, cost double) rows
   are written as Parquet to a scratch directory and read back on the
   driver with pyarrow; millions of rows never go through py4j. Each row is
   placed at its global id (a counting sort: the order of (chart, cell)),
   and every cell must be present exactly once.

Both engines run the same elementwise numpy code on the same cell centroids,
so their charts are identical: the same plan ids, the same plan index and
bitwise-equal costs. A chart's ``seconds`` is the job's wall time (from
submitting the job to the checked result; not the session's start-up) split
in proportion to the chart's cell·plan evaluations.

On a multi-machine cluster the executors write the Parquet files, so
``scratch`` must be a directory mounted at the same path on the driver and
every executor (e.g. NFS); the default is a temporary directory on the
driver, which a cluster on the driver's machine (or ``local[*]``) can use.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import importlib
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from catalog import Catalog
from catalog.errors import CqoptError
from charts.build import CHUNK_CELLS, Chart, ChartContext, chart_from_cells, evaluate_cells
from charts.spec import ChartSpec

if TYPE_CHECKING:  # pyspark and pyarrow load only when a Spark build runs
    import pyarrow as pa
    from pyspark.sql import SparkSession

MIN_JAVA = 17
PACKAGES = ("catalog", "optimizer", "costmodel", "charts")  # what executors must import
PACKAGES_ZIP = "cqopt-packages.zip"
MIN_PARTITION_CELLS = 1 << 15  # below this a task's fixed cost outweighs its kernel time
TASKS_PER_CORE = 4  # a few tasks per core balance charts whose plans cost unequally
RESULT_DDL = "chart int, cell long, plan int, cost double"
ARROW_BATCH = "spark.sql.execution.arrow.maxRecordsPerBatch"

# Spark's own default profile at WARN, minus the start-up notices nobody acts on.
_LOG4J2 = """\
rootLogger.level = warn
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n%ex
logger.nativeio.name = org.apache.hadoop.util.NativeCodeLoader
logger.nativeio.level = error
logger.jetty.name = org.sparkproject.jetty.util.component.AbstractLifeCycle
logger.jetty.level = error
logger.parquet.name = org.apache.parquet.CorruptStatistics
logger.parquet.level = error
"""


class SparkBuildError(CqoptError):
    """Spark cannot start, a Spark build fails, or its result is not a complete set of charts."""


# -- Spark's failures as cqopt errors ---------------------------------------------
@contextlib.contextmanager
def spark_errors(what: str, error: Callable[[str], CqoptError] = SparkBuildError,
                 hint: str | Callable[[str], str] = "") -> Iterator[None]:
    """Turn Spark's and Py4J's exceptions into ``error(f"{what}: {message}{hint}")``.

    ``message`` is the line of Spark's text that says what went wrong (see
    :func:`spark_message`); ``hint`` may depend on Spark's whole text. Every
    Spark failure a user can meet reaches them as a :class:`CqoptError`, never
    as a JVM or Python-worker stack trace.
    """
    from py4j.protocol import Py4JError
    from pyspark.errors import PySparkException  # AnalysisException, PythonException, ...

    try:
        yield
    except (PySparkException, Py4JError) as err:
        tail = hint(str(err)) if callable(hint) else hint
        raise error(f"{what}: {spark_message(err)}{tail}") from None


# The last line of a Python traceback: the exception's (module-qualified) name and message.
_RAISED = re.compile(r"(?:\w+\.)*(\w*(?:Error|Exception|Exit|Interrupt)): (.*)")
_JAVA_CLASS = re.compile(r"(?:[a-z_]\w*\.)+(?=[A-Z]\w*: )")  # org.apache.spark. in front
_ERROR_CLASS = re.compile(r"\[[A-Z][A-Z_]*(?:\.[A-Z_]+)*\]")  # Spark's [FAILED_READ_FILE...]


def spark_message(err: BaseException, limit: int = 300) -> str:
    r"""The line of a Spark failure that says what went wrong, at most ``limit`` characters.

    A Python worker's exception is its last line (``ValueError: ...``), not
    the traceback above it. A Java exception is the first of its chain
    (itself, then each "Caused by") that names one of Spark's error classes,
    else the root cause; never the "An error occurred while calling o42.x"
    in front of it, nor the stack frames.

    >>> spark_message(RuntimeError("An error occurred while calling o7.x.\n"
    ...     ": org.apache.spark.SparkException: Exception thrown in awaitResult:\n\tat a.b(C)\n"
    ...     "Caused by: org.apache.spark.SparkException: [FAILED_READ_FILE] f: gone\n\tat d"))
    'SparkException: [FAILED_READ_FILE] f: gone'
    >>> spark_message(RuntimeError("From the worker:\nTraceback (most recent call last):\n"
    ...                            '  File "f.py"\ncharts.x.BadError: a: b\nmore'))
    'BadError: a: b'
    """
    lines = [line.strip() for line in str(err).strip().splitlines() if line.strip()]
    if not lines:
        return type(err).__name__
    if any(line.startswith("Traceback (most recent call last)") for line in lines):
        raised = [m for m in map(_RAISED.fullmatch, lines) if m]
        line = f"{raised[-1].group(1)}: {raised[-1].group(2)}" if raised else lines[0]
    else:
        if len(lines) > 1 and lines[0].startswith("An error occurred while calling"):
            lines = lines[1:]
        chain = [lines[0].lstrip(": ")] + [line.removeprefix("Caused by:").strip()
                                           for line in lines if line.startswith("Caused by:")]
        chain = [_JAVA_CLASS.sub("", link, count=1) for link in chain]
        line = next((link for link in chain if _ERROR_CLASS.search(link)), chain[-1])
    return line if len(line) <= limit else line[: limit - 3] + "..."


# -- the session ---------------------------------------------------------------
def check_java() -> int:
    """The major version of the ``java`` Spark would run; a clear error below 17.

    Spark's launcher runs ``$JAVA_HOME/bin/java`` when ``JAVA_HOME`` is set,
    else ``java`` on the PATH; so does this check.
    """
    java_home = os.environ.get("JAVA_HOME")
    java = (str(Path(java_home, "bin", "java")) if java_home else shutil.which("java"))
    where = f"JAVA_HOME={java_home}" if java_home else "the PATH"
    if java is None or not os.access(java, os.X_OK):
        raise _java_error(f"no java executable on {where}")
    try:
        probe = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise _java_error(f"{java} -version failed: {err}") from None
    text = probe.stderr + probe.stdout
    match = re.search(r'version "(\d+)(?:\.(\d+))?', text)
    if probe.returncode != 0 or match is None:
        first = text.strip().splitlines()[0] if text.strip() else f"exit {probe.returncode}"
        raise _java_error(f"{java} -version did not report a version ({first})")
    # Java 8 and older call themselves "1.8.0_292"; 9+ start with the major version.
    major = int(match.group(2) or 0) if match.group(1) == "1" else int(match.group(1))
    if major < MIN_JAVA:
        raise _java_error(f"{java} is Java {major} ({text.strip().splitlines()[0]})")
    return major


def _java_error(found: str) -> SparkBuildError:
    return SparkBuildError(
        f"Spark needs Java {MIN_JAVA} or newer on the PATH; found {found}; install a JDK "
        f"{MIN_JAVA}+ (e.g. apt-get install openjdk-17-jre-headless) and put its java on "
        "the PATH or point JAVA_HOME at it, or build with --engine local")


def spark_session(master: str = "local[*]", app_name: str = "cqopt", progress: bool = True,
                  conf: dict[str, str] | None = None) -> SparkSession:
    """A new Spark session for chart builds; ``conf`` entries win over the defaults.

    Refuses to run beside another SparkContext of this process: Spark would
    hand back that one and silently ignore ``master`` and ``conf``. Sets
    ``os.environ["PYSPARK_PYTHON"]`` to the workers' Python (``sys.executable``
    unless ``conf`` names ``spark.pyspark.python``) for the rest of the
    process: Python workers must run the driver's Python, numpy and cqopt, and
    PySpark reads the variable again whenever it starts one. A master Spark
    does not know, or a session that cannot start, is a :class:`SparkBuildError`.
    """
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    check_master(master)
    if "PYSPARK_GATEWAY_PORT" not in os.environ:  # under spark-submit the JVM already runs
        check_java()
    if SparkContext._active_spark_context is not None:
        active = SparkContext._active_spark_context.master
        raise SparkBuildError(f"a Spark session (master {active}) is already running in this "
                              "process; pass it as spark= instead of starting another")
    conf = {k: str(v) for k, v in (conf or {}).items()}
    # Workers must run the driver's Python: the same numpy, pyarrow and cqopt.
    python = conf.setdefault("spark.pyspark.python", sys.executable)
    os.environ["PYSPARK_PYTHON"] = python
    local = _is_local(master)
    settings = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": str(progress).lower(),
        "spark.sql.shuffle.partitions": str(2 * _local_cores(master)),
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        **conf,
    }
    if "log4j" not in settings.get("spark.driver.extraJavaOptions", ""):
        settings["spark.driver.extraJavaOptions"] = " ".join(filter(None, [
            settings.get("spark.driver.extraJavaOptions", ""),
            f"-Dlog4j2.configurationFile=file:{_log4j_file()}"]))
    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in settings.items():
        builder = builder.config(key, value)
    # A local driver talks to no one: bind it to loopback, which also spares the
    # "hostname resolves to a loopback address" warnings.
    env = {"SPARK_LOCAL_IP": "127.0.0.1"} if local and "SPARK_LOCAL_IP" not in os.environ else {}
    hint = ("; check the master URL" + ("" if local else " and that its cluster is up")
            + "; Spark's log above may say more")
    with spark_errors(f"Spark could not start with master {master!r}", hint=hint):
        with _environ(env):
            spark = builder.getOrCreate()
        try:
            spark.sparkContext.setLogLevel("WARN")
            if not local:
                ship_packages(spark)
        except BaseException:
            spark.stop()  # half started: stop it, or the next attempt would be refused
            raise
    return spark


def check_master(master: str) -> None:
    """A clear error for a master URL Spark's launcher rejects, before a JVM starts.

    The launcher's own rule: ``yarn``, or a URL starting with ``spark``,
    ``k8s`` or ``local``. Its complaint would go to stderr as a JVM stack
    trace, followed by a Python one.

    >>> check_master("local[2]"), check_master("spark://host:7077"), check_master("yarn")
    (None, None, None)
    """
    if master != "yarn" and not master.startswith(("spark", "k8s", "local")):
        raise SparkBuildError(
            f"Spark could not start with master {master!r}: not a master URL Spark knows; "
            "check the master URL: local[*], local[N], spark://HOST:PORT (standalone), "
            "yarn, or k8s://https://HOST:PORT")


def ship_packages(spark: SparkSession) -> None:
    """Zip cqopt's packages and add the zip to the session's Python path (once).

    Executors on other machines cannot import cqopt otherwise. Spark serves
    the zip from the driver for the session's life, so it stays until exit.
    """
    sc = spark.sparkContext
    if PACKAGES_ZIP in (sc._python_includes or []):
        return
    folder = Path(tempfile.mkdtemp(prefix="cqopt-pyfiles-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    path = folder / PACKAGES_ZIP
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name in PACKAGES:
            package = Path(importlib.import_module(name).__file__).parent
            for file in sorted(package.rglob("*")):
                if file.is_file() and "__pycache__" not in file.parts and file.suffix != ".pyc":
                    zf.write(file, file.relative_to(package.parent).as_posix())
    sc.addPyFile(str(path))


def _is_local(master: str) -> bool:
    """``local``, ``local[N]``, ``local[*]``, ``local[N, F]``: executors in the driver's JVM.

    ``local-cluster[...]`` is not: its executors are separate processes.
    """
    return re.fullmatch(r"local(\[[^\]]*\])?", master.strip()) is not None


def _local_cores(master: str) -> int:
    match = re.fullmatch(r"local(?:\[(\d+|\*)(?:,\s*\d+)?\])?", master.strip())
    if match and match.group(1) and match.group(1) != "*":
        return int(match.group(1))
    return 1 if master.strip() == "local" else os.cpu_count() or 1


@functools.cache
def _log4j_file() -> Path:
    folder = Path(tempfile.mkdtemp(prefix="cqopt-log4j-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    path = folder / "log4j2.properties"
    path.write_text(_LOG4J2, encoding="utf-8")
    return path


@contextlib.contextmanager
def _environ(values: dict[str, str]) -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


# -- the driver ----------------------------------------------------------------
def build_spark(specs: list[ChartSpec], catalog: Catalog, spark: SparkSession | None = None,
                master: str = "local[*]", progress: bool = True,
                scratch: Path | None = None) -> list[Chart]:
    """Build every chart in one Spark job; the same charts as :func:`charts.build.build_local`.

    Without ``spark`` a session on ``master`` is started and stopped at the end;
    a given session is left running. ``scratch`` is where the job's Parquet goes
    (a fresh subdirectory of it, removed afterwards); see the module docstring.
    """
    specs = list(specs)
    if not specs:
        return []
    contexts = [ChartContext(spec, catalog) for spec in specs]
    for context in contexts:  # fail fast, on the driver, on a bad query, model or weights
        _ = (context.plans, context.model, context.utility)  # each a cached property
    own = spark is None
    if own:
        spark = spark_session(master, progress=progress)
    try:
        with spark_errors("the Spark job building the charts failed"):
            if not _is_local(spark.sparkContext.master):
                ship_packages(spark)
            start = time.perf_counter()
            plan, cost = _run_job(spark, contexts, catalog, scratch, progress)
            elapsed = time.perf_counter() - start
    finally:
        if own:
            spark.stop()
    work = np.array([spec.n_cells * len(c.plans) for spec, c in zip(specs, contexts)], float)
    share = work / work.sum()
    offsets = _offsets(specs)
    return [chart_from_cells(context, plan[lo:hi], cost[lo:hi], float(elapsed * part))
            for context, lo, hi, part in zip(contexts, offsets[:-1], offsets[1:], share)]


def _offsets(specs: list[ChartSpec]) -> np.ndarray:
    """Chart c's cells are the global ids offsets[c] .. offsets[c + 1] - 1."""
    return np.concatenate([[0], np.cumsum([s.n_cells for s in specs], dtype=np.int64)])


def _partitions(total: int, parallelism: int) -> int:
    return max(1, min(TASKS_PER_CORE * max(parallelism, 1),
                      math.ceil(total / MIN_PARTITION_CELLS)))


def _run_job(spark: SparkSession, contexts: list[ChartContext], catalog: Catalog,
             scratch: Path | None, progress: bool) -> tuple[np.ndarray, np.ndarray]:
    """Run the job; the winning plan and cost of every global cell id, in id order."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    specs = [c.spec for c in contexts]
    offsets = _offsets(specs)
    total = int(offsets[-1])
    n_partitions = _partitions(total, spark.sparkContext.defaultParallelism)
    payload = {
        "job": uuid.uuid4().hex,
        "offsets": offsets.tolist(),
        "specs": [spec.to_dict() for spec in specs],
        "catalog": catalog.to_dict(),
        "plan_ids": [[p.id for p in c.plans] for c in contexts],
    }
    if progress:
        print(f"  spark: {len(specs)} charts, {total} cells in {n_partitions} "
              f"partition{'s' * (n_partitions != 1)} on {spark.sparkContext.master}",
              file=sys.stderr, flush=True)
    with _scratch_dir(scratch) as out, _runtime_conf(spark, {ARROW_BATCH: str(CHUNK_CELLS)}):
        spark.sparkContext.setJobDescription(f"cqopt: {len(specs)} charts, {total} cells")
        try:
            (spark.range(0, total, 1, n_partitions)
             .mapInArrow(functools.partial(_cost_batches, payload), RESULT_DDL)
             .write.mode("overwrite").parquet(out.as_uri()))
        finally:
            spark.sparkContext.setJobDescription(None)
        try:
            table = pq.read_table(out, columns=["chart", "cell", "plan", "cost"])
        except (OSError, pa.ArrowInvalid) as err:
            raise SparkBuildError(f"cannot read the Spark job's result in {out}: {err}"
                                  f"{_SHARED_HINT}") from None
        return _place(table, specs, offsets)


_SHARED_HINT = ("; on a cluster, pass scratch= a directory the driver and every executor "
                "share at the same path")


def _place(table: pa.Table, specs: list[ChartSpec],
           offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Put every result row at its global cell id; every cell exactly once, or an error."""
    total = int(offsets[-1])
    chart = table.column("chart").to_numpy().astype(np.int64)
    cell = table.column("cell").to_numpy()
    bad = (chart < 0) | (chart >= len(specs))
    if not bad.any():
        sizes = np.diff(offsets)
        bad = (cell < 0) | (cell >= sizes[chart])
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise SparkBuildError(f"the Spark job returned {int(bad.sum())} rows outside the "
                              f"charts, e.g. chart {chart[i]} cell {cell[i]}")
    ids = offsets[chart] + cell
    seen = np.zeros(total, dtype=bool)
    seen[ids] = True
    # total rows covering all total cells: then no cell can be there twice.
    if table.num_rows != total or not seen.all():
        counts = np.bincount(ids, minlength=total)
        wrong = np.flatnonzero(counts != 1)
        c = int(np.searchsorted(offsets, wrong[0], side="right") - 1)
        hint = _SHARED_HINT if (counts == 0).any() else ""
        raise SparkBuildError(
            f"the Spark job's result has {table.num_rows} rows for {total} cells: "
            f"{int((counts == 0).sum())} cells missing, {int((counts > 1).sum())} "
            f"duplicated, first in chart {specs[c].name!r} cell {int(wrong[0] - offsets[c])}"
            f"{hint}")
    plan = np.empty(total, dtype=np.uint16)
    cost = np.empty(total, dtype=np.float64)
    plan[ids] = table.column("plan").to_numpy()
    cost[ids] = table.column("cost").to_numpy()
    return plan, cost


@contextlib.contextmanager
def _scratch_dir(scratch: Path | None) -> Iterator[Path]:
    """A fresh directory for one job's Parquet (inside ``scratch``), removed afterwards."""
    parent = None if scratch is None else Path(scratch).resolve()
    if parent is not None:
        parent.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix="cqopt-spark-", dir=parent))
    try:
        yield folder / "cells.parquet"
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@contextlib.contextmanager
def _runtime_conf(spark: SparkSession, values: dict[str, str]) -> Iterator[None]:
    """Set SQL confs for one job and restore the caller's session afterwards."""
    saved = {k: spark.conf.get(k, None) for k in values}
    for key, value in values.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)


# -- the executors ---------------------------------------------------------------
# One job's contexts per Python worker, by chart index: Spark reuses a worker for
# many tasks, so each chart's plans are enumerated once per worker, not per batch.
_CONTEXTS: dict[int, ChartContext] = {}
_JOB: dict[str, Any] = {"id": None, "catalog": None}


def _context(payload: dict[str, Any], chart: int) -> ChartContext:
    if _JOB["id"] != payload["job"]:
        _CONTEXTS.clear()  # another job's charts: the indices name other specs now
        _JOB.update(id=payload["job"], catalog=Catalog.from_dict(payload["catalog"]))
    context = _CONTEXTS.get(chart)
    if context is None:
        spec = ChartSpec.from_dict(payload["specs"][chart])
        context = ChartContext(spec, _JOB["catalog"])
        ids = [p.id for p in context.plans]
        if ids != payload["plan_ids"][chart]:
            # The plan index means nothing if the executor's cqopt enumerates differently;
            # the driver reports this as the job's SparkBuildError.
            raise SparkBuildError(f"chart {spec.name!r}: this executor's plans {ids} differ "
                                  f"from the driver's {payload['plan_ids'][chart]}; executors "
                                  "must run the driver's cqopt version")
        _CONTEXTS[chart] = context
    return context


def _cost_batches(payload: dict[str, Any],
                  batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """mapInArrow's function: the winning plan and cost of each cell id in each batch."""
    import pyarrow as pa

    offsets = np.asarray(payload["offsets"], dtype=np.int64)
    for batch in batches:
        ids = batch.column(0).to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
        chart = np.searchsorted(offsets, ids, side="right") - 1
        cell = ids - offsets[chart]
        plan = np.empty(len(ids), dtype=np.int32)
        cost = np.empty(len(ids), dtype=np.float64)
        # Group rows by chart (ids arrive sorted, so this is cheap), one kernel call each.
        order = np.argsort(chart, kind="stable")
        for rows in np.split(order, np.flatnonzero(np.diff(chart[order])) + 1):
            if len(rows):
                c = int(chart[rows[0]])
                plan[rows], cost[rows] = evaluate_cells(_context(payload, c), cell[rows])
        yield pa.RecordBatch.from_arrays(
            [pa.array(chart.astype(np.int32)), pa.array(cell), pa.array(plan), pa.array(cost)],
            names=["chart", "cell", "plan", "cost"])
