"""A real standalone Spark cluster (one master, one worker) builds the local charts, and
runs and replays a workload giving the rows and statistics local[2] gives.

The master and the worker run from the installed pyspark distribution, on
loopback, with their logs and work directories in the test's tmp path; the
module starts them once. ``cqopt build``, ``cqopt run`` and ``cqopt fidelity``
run in one subprocess (``--master spark://...``) whose executors start in the
worker's work directory without cqopt on their PYTHONPATH: they import it from
the zip the driver ships. The local references run in this process, on the
shared local[2] session.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import cqopt.charts as charts
from cqopt.catalog import load_catalog
from cqopt.charts.build import build_local
from cqopt.charts.spec import workload_specs
from cqopt.charts.workload import load_workload
from cqopt.errors import CqoptError
from cqopt.spark.session import check_java

# A standalone cluster is a JVM of its own: `pytest -m "not spark"` leaves it out.
pytestmark = pytest.mark.spark


START_TIMEOUT = 60  # seconds for the master to listen and the worker to register
# build, run and fidelity in one driver; a slower machine may give more
CLUSTER_TIMEOUT = int(os.environ.get("CQOPT_TEST_CLUSTER_TIMEOUT", "240"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tail(path: Path, lines: int = 25) -> str:
    text = path.read_text(errors="replace") if path.exists() else "(no output)"
    return "\n".join(text.splitlines()[-lines:])


def stop(proc: subprocess.Popen) -> None:
    """Terminate a process group started with start_new_session (the JVM and its children)."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=15)
        except ProcessLookupError:
            pass


class Cluster:
    def __init__(self, tmp: Path):
        import pyspark

        self.tmp = tmp
        self.spark_class = Path(pyspark.__file__).parent / "bin" / "spark-class"
        self.port, self.ui_port, self.worker_ui_port = free_port(), free_port(), free_port()
        self.url = f"spark://127.0.0.1:{self.port}"
        self.env = {k: v for k, v in os.environ.items()
                    if k not in ("PYTHONPATH", "SPARK_HOME", "PYSPARK_GATEWAY_PORT")}
        self.env.update(SPARK_HOME=str(self.spark_class.parent.parent),
                        SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable,
                        SPARK_LOG_DIR=str(tmp / "logs"), SPARK_WORKER_DIR=str(tmp / "work"),
                        SPARK_NO_DAEMONIZE="1")
        self.procs: dict[str, subprocess.Popen] = {}

    def launch(self, name: str, *args: str) -> None:
        log = open(self.tmp / f"{name}.out", "wb")
        self.procs[name] = subprocess.Popen(
            [str(self.spark_class), *args], env=self.env, cwd=self.tmp, stdout=log,
            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)

    def fail(self, problem: str) -> None:
        logs = "\n".join(f"--- {name}.out\n{tail(self.tmp / f'{name}.out')}" for name in self.procs)
        pytest.fail(f"the standalone cluster did not come up: {problem}\n{logs}")

    def wait(self, ready, what: str, deadline: float) -> None:
        while time.monotonic() < deadline:
            for name, proc in self.procs.items():
                if proc.poll() is not None:
                    self.fail(f"the {name} exited with status {proc.returncode}")
            if ready():
                return
            time.sleep(0.25)
        self.fail(f"{what} within {START_TIMEOUT} s")

    def master_listens(self) -> bool:
        try:
            socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
            return True
        except OSError:
            return False

    def alive_workers(self) -> int:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.ui_port}/json/", timeout=2) as r:
                state = json.load(r)
        except (OSError, ValueError):
            return 0
        return sum(w.get("state") == "ALIVE" for w in state.get("workers", []))

    def start(self) -> None:
        (self.tmp / "work").mkdir()
        deadline = time.monotonic() + START_TIMEOUT
        self.launch("master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                    "--port", str(self.port), "--webui-port", str(self.ui_port))
        self.wait(self.master_listens, f"the master listening on {self.url}", deadline)
        self.launch("worker", "org.apache.spark.deploy.worker.Worker", self.url,
                    "--host", "127.0.0.1", "--cores", "1", "--memory", "1g",
                    "--webui-port", str(self.worker_ui_port), "--work-dir", str(self.tmp / "work"))
        self.wait(lambda: self.alive_workers() >= 1, "a worker registered with the master",
                  deadline)

    def stop(self) -> None:
        for proc in reversed(list(self.procs.values())):
            stop(proc)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[Cluster]:
    try:
        check_java()
    except CqoptError as err:
        pytest.skip(f"no standalone Spark cluster without Java: {err}")
    c = Cluster(tmp_path_factory.mktemp("cluster"))
    try:
        c.start()
        yield c
    finally:
        c.stop()


# -- build, run and fidelity on the cluster give what they give locally -----------------
W = 1.0


@pytest.fixture(scope="module")
def workload_input(examples, tmp_path_factory) -> dict[str, Path]:
    """The example workload's charts, and 3 s of TCP, UDP and SF at tens of tuples a second
    (join keys over 10 hosts, so Q2's joins match), one Parquet file per stream per round:
    ``traces/STREAM/part-*.parquet``, a run's sources and a replay's trace folder at once."""
    from cqopt.charts.store import write_chart_set
    from cqopt.replay.trace_generate import generate_trace
    from cqopt.replay.trace_write import write_trace_per_round

    catalog = load_catalog(examples / "dec-pkt.toml")
    folder = tmp_path_factory.mktemp("workload")
    specs = workload_specs(load_workload(examples / "workload.toml"), catalog)
    write_chart_set(folder / "charts", build_local([s for s, _ in specs], catalog,
                                                   progress=False), catalog)
    keys = {"TCP": {"src_host": 10, "dest_host": 5}, "UDP": {"dest_host": 10},
            "SF": {"dest_host": 10}}
    for i, (stream, rate) in enumerate((("TCP", 40.0), ("UDP", 20.0), ("SF", 20.0))):
        trace = generate_trace(catalog.stream(stream), 3.0, seed=21 + i, mean_rate=rate,
                               steady=keys[stream])
        write_trace_per_round(trace, folder / "traces" / stream, W, start=0.0)
    return {"catalog": examples / "dec-pkt.toml", "workload": examples / "workload.toml",
            "charts": folder / "charts", "traces": folder / "traces"}


def sorted_rows(path: Path) -> pd.DataFrame:
    frame = pd.read_parquet(path)
    return frame.sort_values(list(frame.columns), ignore_index=True)


def run_args(given: dict[str, Path], out: str) -> list[str]:
    """cqopt run of the whole workload (Q1 and Q2 in one streaming query) into ``out``."""
    return ["run", "--catalog", str(given["catalog"]), "--workload", str(given["workload"]),
            "--charts", str(given["charts"]), "--out", out,
            *[f"--source={s}={given['traces'] / s}" for s in ("TCP", "UDP", "SF")]]


def fidelity_args(given: dict[str, Path], traces: str, out: str) -> list[str]:
    """cqopt fidelity of Q1 over the same traces (so Spark reads TCP's alone: each trace
    read costs seconds, more than the rest of a replay this small), without a k sweep."""
    return ["fidelity", "--catalog", str(given["catalog"]), "--workload",
            str(given["workload"]), "--charts", str(given["charts"]), "--query", "Q1",
            "--k-sweep", "none", "--traces", traces, "--out", out]


@pytest.fixture(scope="module")
def cluster_outputs(examples, cluster, workload_input, tmp_path_factory) -> Path:
    """``cqopt build``, ``cqopt run`` and ``cqopt fidelity``, each with ``--master
    spark://...``, one after the other in one subprocess. The session on the cluster is
    started as each command starts it (``running_session``, which ships cqopt to the
    executors as a zip), once, before the first: each command takes that running
    session, so one driver and one executor serve all three (each start costs seconds).
    The executors start in the worker's work directory without cqopt on their
    PYTHONPATH: they import it from the zip.
    """
    folder = tmp_path_factory.mktemp("on-cluster")
    build = ["build", "--catalog", str(examples / "dec-pkt.toml"), "--workload",
             str(examples / "workload.toml"), "--out", str(folder / "charts"), "--k", "8"]
    commands = [[*c, "--master", cluster.url, "--quiet"] for c in (
        build, run_args(workload_input, str(folder / "run")),
        fidelity_args(workload_input, str(workload_input["traces"]),
                      str(folder / "fidelity")))]
    script = ("import sys\n"
              "from cqopt.cli.main import main\n"
              "from cqopt.spark.session import running_session\n"
              f"with running_session({cluster.url!r}, progress=False):\n"
              f"    sys.exit(max(main(c) for c in {commands!r}))\n")
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=folder, env=cluster.env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        output, _ = proc.communicate(timeout=CLUSTER_TIMEOUT)
    except subprocess.TimeoutExpired:
        stop(proc)
        pytest.fail(f"cqopt build, run and fidelity on {cluster.url} took over "
                    f"{CLUSTER_TIMEOUT} s\n{tail(cluster.tmp / 'worker.out')}")
    finally:
        stop(proc)
    assert proc.returncode == 0, output
    return folder


def test_cluster_build_matches_local(examples, cluster, cluster_outputs):
    catalog = load_catalog(examples / "dec-pkt.toml")
    specs = [s for s, _ in workload_specs(load_workload(examples / "workload.toml"), catalog,
                                          {"k": 8})]
    built = charts.load(cluster_outputs / "charts").charts
    for local in build_local(specs, catalog, progress=False):
        remote = built[local.spec.name]
        assert tuple(p.id for p in remote.plans) == local.plan_ids
        assert np.array_equal(remote.plan_index, local.plan_index)
        assert remote.cost.tobytes() == local.cost.tobytes()  # worked out from the plans
    # The work ran on the cluster's executor, which imported cqopt from the shipped zip.
    stderr = "\n".join(p.read_text(errors="replace")
                       for p in (cluster.tmp / "work").rglob("stderr"))
    assert stderr, "no executor ran on the worker"
    assert "cqopt-packages.zip" in "\n".join(str(p) for p in (cluster.tmp / "work").rglob("*"))


def test_cluster_run_matches_local(spark, cluster_outputs, workload_input, tmp_path):
    """cqopt run on the cluster writes, round by round, the rows it writes on local[2]
    (in this process)."""
    from cqopt.cli.main import main

    assert main([*run_args(workload_input, str(tmp_path / "local")), "--master", "local[2]",
                 "--quiet"]) == 0
    for query in ("Q1", "Q2"):
        remote, local = cluster_outputs / "run" / query, tmp_path / "local" / query
        names = sorted(p.name for p in (local / "results").iterdir())
        assert names == [f"round-{r:06d}.parquet" for r in range(3)]
        assert sorted(p.name for p in (remote / "results").iterdir()) == names
        for name in names:
            pd.testing.assert_frame_equal(sorted_rows(remote / "results" / name),
                                          sorted_rows(local / "results" / name))
        columns = ["round", "plan", "rows_in:TCP", "rows_out"]
        logged = [pd.read_csv(run / "rounds.csv")[columns] for run in (remote, local)]
        pd.testing.assert_frame_equal(*logged)
        assert logged[0]["rows_out"].sum() > 0  # the comparison says something


def test_cluster_fidelity_matches_local(spark, cluster_outputs, workload_input, tmp_path):
    """cqopt fidelity reads the traces and works out each round's statistics on Spark
    (the replay itself runs in the driver): on the cluster, the same statistics and the
    same report as on local[2], where it is given its folders as file:// URIs."""
    from cqopt.cli.main import main

    assert main([*fidelity_args(workload_input, f"file://{workload_input['traces']}",
                                f"file://{tmp_path}/local"),
                 "--master", "local[2]", "--quiet"]) == 0
    remote, local = cluster_outputs / "fidelity", tmp_path / "local"
    a, b = (pd.read_parquet(run / "rounds" / "Q1.parquet") for run in (remote, local))
    assert len(a) == 2  # whole rounds of 1 s from the first tuple, in 3 s of trace
    assert (a["rate.TCP"] > 0).all() and (a["sel.TCP"] > 0).all()
    pd.testing.assert_frame_equal(a, b, check_exact=True)
    summaries = [json.loads((run / "summary.json").read_text()) for run in (remote, local)]
    assert list(summaries[0]["queries"]) == ["Q1"] and summaries[0] == summaries[1]
