"""Everything Spark needs to start and to speak: cqopt's one home for a SparkSession.

Every Spark job of cqopt (chart builds, trace statistics, plans run as
DataFrames, streaming) starts its session with :func:`spark_session` and
wraps its Spark calls in :func:`spark_errors`, so that

- Java is checked first (:func:`check_java`), with a clear message, not a
  JVM stack trace; the master URL too (:func:`check_master`);
- the workers run the driver's Python (``PYSPARK_PYTHON``);
- nothing from Spark or the JVM reaches the console: Spark's log is off from
  the start (a log4j2 file of ours; ``CQOPT_SPARK_LOG=warn`` brings it back),
  its console progress bars are off, and the JVM's "WARNING: Using incubator
  modules" line is filtered from its stderr;
- cqopt's packages are shipped to executors on other machines
  (:func:`ship_packages`);
- a Spark or Py4J failure reaches the user as one line
  (:func:`spark_message`), as a :class:`~cqopt.errors.CqoptError`.

>>> check_master("local[2]") is None
True
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import importlib
import os
import pkgutil
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cqopt.errors import CqoptError
from cqopt.progress import heartbeat
from cqopt.spark.jvm_output import jvm_stderr_filtered, stderr_copy

if TYPE_CHECKING:  # pyspark and pyarrow load only when a Spark build runs
    from pyspark.sql import DataFrame, SparkSession

MIN_JAVA = 17
PACKAGES_ZIP = "cqopt-packages.zip"


# Spark's log is off by default: nothing from Spark or the JVM reaches a user's console
# (a failed task would print its whole Java stack trace before cqopt's one line).
# CQOPT_SPARK_LOG=warn (or error, info, debug) brings it back, for a developer.
LOG_LEVELS = ("off", "fatal", "error", "warn", "info", "debug", "trace")


def spark_log_level() -> str:
    """The level of Spark's log: ``CQOPT_SPARK_LOG``, by default ``off``.

    >>> spark_log_level() in LOG_LEVELS
    True
    """
    level = os.environ.get("CQOPT_SPARK_LOG", "off").strip().lower()
    if level not in LOG_LEVELS:
        raise SparkBuildError(f"CQOPT_SPARK_LOG={level!r}: expected one of "
                              + ", ".join(LOG_LEVELS))
    return level


# Spark's own default profile at the chosen level, minus the start-up notices nobody acts on.
_LOG4J2 = """\
rootLogger.level = {level}
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
    from pyspark.errors import (
        PySparkException,  # AnalysisException, PythonException, ...
    )

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


@contextlib.contextmanager
def running_session(master: str = "local[*]",
                    progress: bool | Callable[[str], None] = True,
                    conf: Mapping[str, str] | None = None,
                    ui: bool = False) -> Iterator[SparkSession]:
    """The session already running in this process (a notebook, a test), else a new one.

    A session that was running is left running; one started here is stopped
    on leaving the ``with`` block, also on an error, and a SIGTERM or SIGINT
    in the block (a killed or interrupted command) ends its JVM too before the
    KeyboardInterrupt goes on (:func:`stop_jvm`).

    Parameters
    ----------
    master : str
        The master URL for a new session (ignored when one is running).
    progress : bool or callable
        Say that a new session starts, and when it has (it takes seconds): a
        callable takes the line, True prints it on stderr. Spark's own
        console progress bars are always off (cqopt prints its own).
    conf : dict, optional
        Settings of a new session (see :func:`spark_session`).
    ui : bool
        Turn a new session's Spark UI on, and say its address.

    Yields
    ------
    SparkSession
    """
    from pyspark.sql import SparkSession

    conf = check_conf(conf)
    say = progress if callable(progress) else (
        (lambda line: print(f"cqopt: {line}", file=sys.stderr, flush=True)) if progress
        else (lambda line: None))
    set_aside = driver_data_settings(True, 0)
    overridden = {k: v for k, v in conf.items() if k in set_aside}
    if overridden:  # nothing silent: these keys are set aside for driver-tuple jobs
        say("note: " + ", ".join(f"--conf {k}={v}" for k, v in overridden.items())
            + " applies to jobs over Spark's partitions; jobs over tuples collected to the "
            "driver (a live round, a short backlog) run with "
            + ", ".join(f"{k}={set_aside[k]}" for k in overridden) + " (DRIVER_DATA_CONF: "
            "one partition, no stage that costs more than its work; INTERPRETED_CONF over "
            f"at most {INTERPRETED_TUPLES:,} tuples a plan: no code compiled)")
    active = SparkSession.getActiveSession()
    if active is not None:
        if conf or ui:  # nothing silent: a running session keeps its own settings
            say("note: Spark is already running in this process; its own settings stand "
                "(--conf and --ui apply to a session cqopt starts)")
        yield active
        return
    with _stop_jvm_when_killed() as killed:
        began = time.monotonic()
        say(f"starting Spark ({master})...")
        # Its lines go to a copy of stderr: while the JVM starts, stderr itself is a pipe
        # whose lines are held back until the start is over (jvm_output.jvm_stderr_filtered).
        with stderr_copy() as stream, heartbeat("Spark", None, "starting", stream=stream,
                                                 enabled=bool(progress)):
            spark = spark_session(master, progress=bool(progress), conf=conf, ui=ui)
        say(f"Spark started in {time.monotonic() - began:.1f} s")
        if ui:
            say(f"Spark UI: {spark.sparkContext.uiWebUrl}")
        try:
            yield spark
        finally:
            try:
                spark.stop()
            except Exception:  # noqa: BLE001 - a JVM killed under it; stop_jvm follows
                if not killed():
                    raise


@contextlib.contextmanager
def _stop_jvm_when_killed() -> Iterator[Callable[[], bool]]:
    """In the block, SIGTERM and SIGINT raise KeyboardInterrupt, and either stops the JVM.

    The JVM ignores SIGINT (PySpark starts it so) and outlives a killed
    driver until it notices its stdin close; a command that is killed or
    interrupted stops it (:func:`stop_jvm`) before it exits. Yields a
    function that says whether a signal came. In a thread other than the
    main one (where no handler can be set) it only stops the JVM on
    KeyboardInterrupt.
    """
    import signal

    came: list[int] = []

    def interrupt(signum: int, frame) -> None:
        came.append(signum)
        raise KeyboardInterrupt(signal.Signals(signum).name)

    saved = {}
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGTERM, signal.SIGINT):
            saved[signum] = signal.signal(signum, interrupt)
    try:
        yield lambda: bool(came)
    except KeyboardInterrupt:
        came.append(signal.SIGINT)
        raise
    finally:
        for signum, handler in saved.items():
            signal.signal(signum, handler)
        if came:
            stop_jvm()


def stop_jvm(timeout: float = 10.0) -> None:
    """End this process's Spark JVM now (SIGTERM, then SIGKILL after ``timeout`` seconds).

    For a command that is killed or interrupted: the session need not have
    stopped. A later session in this process starts a new JVM.
    """
    from pyspark import SparkContext

    gateway = SparkContext._gateway
    proc = getattr(gateway, "proc", None)
    if proc is None:
        return
    with contextlib.suppress(Exception):  # noqa: BLE001 - the JVM may be gone already
        gateway.close()
    proc.terminate()
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    SparkContext._gateway = SparkContext._jvm = None
    SparkContext._active_spark_context = None


# The settings of jobs over tuples held on the driver (a micro-batch small enough to
# collect: rounds of a few hundred to LOCAL_FRAME_TUPLES tuples), whose frames are one
# partition each (:func:`driver_frame`). Over so few tuples a stage costs more than the
# work in it: with one partition and no broadcast an aggregate needs no exchange and a
# join none below it, and AQE's re-planning between stages has nothing to gain. The ten
# plans of the ten-query bench's micro-batch took 0.31 s with these against 0.74 s with
# Spark's defaults (medians of 4, one after another), Q2 0.09 s against 0.17 s.
# Spark keeps a join of one-partition inputs unshuffled only while its estimate of the
# inputs' size is under spark.sql.maxSinglePartitionBytes (128 MB), and it estimates a
# join's size as the product of its inputs': from a three-way join over a second's
# thousand tuples a stream on, the second join shuffled both its inputs (the ten-query
# micro-batch's joint job 0.50 s with it, 0.39 s without; medians of 10, interleaved).
DRIVER_DATA_CONF = {"spark.sql.adaptive.enabled": "false",
                    "spark.sql.autoBroadcastJoinThreshold": "-1",
                    "spark.sql.shuffle.partitions": "1",
                    "spark.sql.maxSinglePartitionBytes": str(2 ** 62)}

# Jobs whose plans each read at most INTERPRETED_TUPLES tuples on the driver also run
# interpreted: Spark generates and compiles Java for every stage of every query, and a
# live round's query is always new to its cache (its round and limits are in the code),
# so compiling a plan's stages costs more than the few thousand rows it would speed up.
# The ten-query micro-batch's joint job took 0.22 s interpreted against 0.37 s compiled
# (medians of 24 captured micro-batches, interleaved); a join and aggregate of two
# streams of 10,000 tuples each 0.21 against 0.30 s, of 50,000 each 0.50 against 0.62 s,
# of 100,000 each 0.98 against 0.78 s. spark.sql.codegen.factoryMode is a setting Spark
# keeps for its own tests of the interpreted path: were a release to drop it, Spark would
# ignore it and these jobs would compile again, their rows the same.
INTERPRETED_TUPLES = 50_000
INTERPRETED_CONF = {"spark.sql.codegen.wholeStage": "false",
                    "spark.sql.codegen.factoryMode": "NO_CODEGEN"}


def driver_frame(spark: SparkSession, table: Any) -> DataFrame:
    """Tuples held on the driver (an Arrow table) as a DataFrame of one partition, for jobs
    run under :data:`DRIVER_DATA_CONF`: Spark then knows every row is in one place and
    plans an aggregate or a join over it without an exchange."""
    return spark.createDataFrame(table).coalesce(1)


def driver_data_conf(spark: SparkSession, local: bool, tuples: int | None = None):
    """:func:`session_conf` with :func:`driver_data_settings`."""
    return session_conf(spark, driver_data_settings(local, tuples))


def driver_data_settings(local: bool, tuples: int | None = None) -> dict[str, str]:
    """:data:`DRIVER_DATA_CONF` for jobs over ``local`` frames (tuples on the driver,
    :func:`driver_frame`), with :data:`INTERPRETED_CONF` when no plan of the job reads
    more than :data:`INTERPRETED_TUPLES` (``tuples``: the most any plan reads; None: not
    known, compiled); nothing (the session's own settings) otherwise.

    >>> driver_data_settings(True, 2_000)["spark.sql.codegen.wholeStage"]
    'false'
    >>> "spark.sql.codegen.wholeStage" in driver_data_settings(True, 2_000_000)
    False
    """
    small = tuples is not None and tuples <= INTERPRETED_TUPLES
    return {**DRIVER_DATA_CONF, **(INTERPRETED_CONF if small else {})} if local else {}


@contextlib.contextmanager
def session_conf(spark: SparkSession, settings: Mapping[str, str]) -> Iterator[None]:
    """Spark SQL settings changed for the block, then restored (the session's own)."""
    before = {key: spark.conf.get(key, None) for key in settings}
    for key, value in settings.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)


def check_conf(conf: Mapping[str, Any] | None) -> dict[str, str]:
    """Spark settings as ``--conf KEY=VALUE`` gives them, each key checked: Spark reads
    only ``spark.`` keys (Hadoop's as ``spark.hadoop.KEY``) and drops others with no word.

    >>> check_conf({"spark.sql.shuffle.partitions": 4})
    {'spark.sql.shuffle.partitions': '4'}
    >>> check_conf({"sql.shuffle.partitions": "4"})
    Traceback (most recent call last):
    ...
    cqopt.spark.session.SparkBuildError: --conf sql.shuffle.partitions=4: Spark reads only keys that start with spark. (Hadoop's as spark.hadoop.KEY); did you mean spark.sql.shuffle.partitions?
    """
    checked = {}
    for key, value in (conf or {}).items():
        if not str(key).startswith("spark."):
            raise SparkBuildError(f"--conf {key}={value}: Spark reads only keys that start "
                                  f"with spark. (Hadoop's as spark.hadoop.KEY); did you mean "
                                  f"spark.{key}?")
        checked[str(key)] = str(value)
    return checked


def spark_session(master: str = "local[*]", app_name: str = "cqopt", progress: bool = True,
                  conf: Mapping[str, str] | None = None, ui: bool = False) -> SparkSession:
    """A new Spark session for chart builds; ``conf`` entries win over the defaults, and
    ``ui`` turns the Spark UI on (off by default).

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
        "spark.ui.enabled": "true" if ui else "false",
        # Spark's progress bars draw over cqopt's own progress lines: always off.
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": str(2 * _local_cores(master)),
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        # A workload's queries run their plans' jobs side by side, each query's in a pool
        # of its own (spark.run.concurrent): pools share the cores fairly, so one query's
        # large job does not queue every other's behind it. Jobs in no pool go to the
        # default one, first come first served: a lone query schedules as under FIFO.
        "spark.scheduler.mode": "FAIR",
        # PySpark's DataFrame debugging asks the JVM for the call site of every column
        # function (five round trips each): 60% of a workload run's calls to the JVM.
        "spark.python.sql.dataFrameDebugging.enabled": "false",
        # A local file system lists thousands of files faster than a Spark job does (a
        # backlog of one file per round and stream: 14 s of 600 rounds' 44 went to it).
        **({"spark.sql.sources.parallelPartitionDiscovery.threshold": "100000"} if local
           else {}),
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
    level = spark_log_level()
    hint = ("; check the master URL" + ("" if local else " and that its cluster is up")
            + ("; Spark's log above may say more" if level != "off" else
               "; CQOPT_SPARK_LOG=warn shows Spark's log"))
    jvm_said: list[str] = []  # what the JVM printed while it failed to start

    def said(text: str) -> str:
        return (f"; the JVM said: {'; '.join(jvm_said[:2])}" if jvm_said else "") + hint

    with spark_errors(f"Spark could not start with master {master!r}", hint=said):
        with _environ(env), jvm_stderr_filtered() as start:
            try:
                spark = builder.getOrCreate()
            except Exception:
                jvm_said.extend(start.failed())
                raise
            start.started()
        try:
            spark.sparkContext.setLogLevel(level.upper())
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
        for name, folder in package_folders().items():
            prefix = name.replace(".", "/")
            for file in sorted(Path(folder).glob("*.py")):  # subpackages come as their own
                zf.write(file, f"{prefix}/{file.name}")
    sc.addPyFile(str(path))


def package_folders() -> dict[str, str]:
    """Each cqopt package, nested ones too, and the folder its modules are in.

    The subpackages map to the repository's top-level folders (setup.cfg's
    ``package_dir``), so they need not sit inside ``cqopt``'s own folder; a
    nested package (``cqopt.optimizer.plans``) is a folder of its parent's.

    >>> folders = package_folders()
    >>> sorted(folders)[:3], "cqopt.optimizer.plans" in folders
    (['cqopt', 'cqopt.api', 'cqopt.catalog'], True)
    """
    import cqopt

    folders = {"cqopt": cqopt.__path__[0]}
    for info in pkgutil.iter_modules(cqopt.__path__, prefix="cqopt."):
        if info.ispkg:
            folders[info.name] = importlib.import_module(info.name).__path__[0]
    unvisited = [name for name in folders if name != "cqopt"]
    while unvisited:
        parent = unvisited.pop()
        for info in pkgutil.iter_modules([folders[parent]], prefix=parent + "."):
            if info.ispkg:
                folders[info.name] = str(Path(folders[parent], info.name.rsplit(".", 1)[1]))
                unvisited.append(info.name)
    return folders


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
    path.write_text(_LOG4J2.replace("{level}", spark_log_level()), encoding="utf-8")
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


