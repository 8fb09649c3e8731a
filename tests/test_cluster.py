"""A real standalone Spark cluster (one master, one worker) builds the local charts.

The master and the worker run from the installed pyspark distribution, on
loopback, with their logs and work directories in the test's tmp path. The
build runs in a subprocess (``cqopt build --master spark://...``) whose
executors start in the worker's work directory without cqopt on their
PYTHONPATH: they import it from the zip the driver ships.
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
BUILD_TIMEOUT = 120


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


def test_cluster_build_matches_local(examples, cluster, tmp_path):
    out = tmp_path / "charts"
    env = cluster.env  # the driver imports the installed cqopt; executors get the zip
    build = subprocess.Popen(
        [sys.executable, "-m", "cqopt", "build", "--catalog", str(examples / "dec-pkt.toml"),
         "--workload", str(examples / "workload.toml"), "--out", str(out), "--k", "8",
         "--master", cluster.url, "--quiet"],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True)
    try:
        output, _ = build.communicate(timeout=BUILD_TIMEOUT)
    except subprocess.TimeoutExpired:
        stop(build)
        pytest.fail(f"cqopt build on {cluster.url} took over {BUILD_TIMEOUT} s\n"
                    f"{tail(cluster.tmp / 'worker.out')}")
    finally:
        stop(build)
    assert build.returncode == 0, output

    catalog = load_catalog(examples / "dec-pkt.toml")
    specs = [s for s, _ in workload_specs(load_workload(examples / "workload.toml"), catalog,
                                          {"k": 8})]
    built = charts.load(out).charts
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
