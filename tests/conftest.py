"""Shared test fixtures and paths."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
SHARED_DATA = ROOT.parent / "shared" / "data"


import pytest  # noqa: E402


@pytest.fixture(scope="session")
def spark():
    """One local Spark session for the whole test run (start-up costs seconds)."""
    from cqopt.spark.session import spark_session

    session = spark_session("local[2]", progress=False,
                            conf={"spark.sql.shuffle.partitions": "2"})
    yield session
    session.stop()
