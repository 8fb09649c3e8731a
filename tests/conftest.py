"""Shared fixtures: the repository's paths, the example catalog, one Spark session.

Tests ask for what they need by fixture name; nothing imports this module.
Every test that uses the ``spark`` fixture is marked ``spark`` here, so
``pytest -m "not spark"`` runs the pure-Python suite without a JVM.
"""

from __future__ import annotations

from pathlib import Path

import pytest

_ROOT = Path(__file__).resolve().parent.parent


def pytest_collection_modifyitems(items):
    for item in items:
        if "spark" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.spark)


@pytest.fixture(scope="session")
def repo_root() -> Path:
    """The repository's top folder."""
    return _ROOT


@pytest.fixture(scope="session")
def examples() -> Path:
    """The example catalogs and workloads."""
    return _ROOT / "examples"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The real stream traces beside the repository; tests skip when they are absent."""
    return _ROOT.parent / "shared" / "data"


@pytest.fixture(scope="session")
def dec_catalog(examples):
    """The OM paper's DEC-PKT catalog (TCP, UDP, SF)."""
    from cqopt.catalog import load_catalog

    return load_catalog(examples / "dec-pkt.toml")


@pytest.fixture(scope="session")
def spark():
    """One local Spark session for the whole test run (start-up costs seconds)."""
    from cqopt.spark.session import spark_session

    session = spark_session("local[2]", progress=False,
                            conf={"spark.sql.shuffle.partitions": "2"})
    yield session
    session.stop()


@pytest.fixture(scope="session")
def dec_toml(examples) -> str:
    """The DEC-PKT catalog's path, as a command-line argument."""
    return str(examples / "dec-pkt.toml")


@pytest.fixture(scope="session")
def workload_toml(examples) -> str:
    """The example workload's path (the OM paper's Q1 and Q2), as a command-line argument."""
    return str(examples / "workload.toml")


@pytest.fixture
def no_spark_start(monkeypatch):
    """Spark's start replaced by a failure: a check that passes reaches it."""
    def start(*args, **kwargs):
        raise AssertionError("Spark started")

    monkeypatch.setattr("cqopt.spark.session.running_session", start)
