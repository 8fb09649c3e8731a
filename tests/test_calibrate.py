"""``cqopt calibrate``: operator rates measured on Spark, fitted, and written as a catalog."""

from __future__ import annotations

import time

import pytest

from cqopt.catalog import load_catalog
from cqopt.cli.main import main
from cqopt.spark import calibrate as cal

# Synthetic timings: a fixed 0.08 s per job plus rows / rate.
RATES = {"selection_equality": 2e7, "selection_range": 1.5e7, "projection": 3e7,
         "equi_join": 4e6, "aggregate": 1e7}


def fake_measure(spark, catalog, max_rows, sizes, repeats, say):
    say("timing (synthetic)")
    sizes = [max_rows >> i for i in reversed(range(sizes))]
    return {kind: [((2 if kind == "equi_join" else 1) * n,
                    0.08 + (2 if kind == "equi_join" else 1) * n / rate) for n in sizes]
            for kind, rate in RATES.items()}


@pytest.fixture
def no_spark(monkeypatch):
    """calibrate's Spark parts replaced: the command's own logic, without a JVM."""
    import contextlib

    monkeypatch.setattr(cal, "measure", fake_measure)
    monkeypatch.setattr(cal, "describe_spark", lambda spark: "Spark test, master local[2]")
    monkeypatch.setattr("cqopt.spark.session.running_session",
                        lambda master, progress, conf=None: contextlib.nullcontext(None))


def test_fit_recovers_rate_and_fixed_cost():
    assert cal.fit_rate([1e5, 2e5, 4e5, 8e5], [0.1 + r / 4e6 for r in (1e5, 2e5, 4e5, 8e5)]) \
        == (4e6, 0.1)
    with pytest.raises(cal.CalibrationError, match="does not grow with the rows.*--rows"):
        cal.fit_rate([1e3, 2e3], [0.3, 0.1])
    with pytest.raises(cal.CalibrationError, match="two sizes"):
        cal.fit_rate([1e3, 1e3], [0.3, 0.1])


def test_calibrate_writes_a_catalog_with_the_measured_rates(no_spark, dec_toml, tmp_path,
                                                            capsys):
    out = tmp_path / "calibrated.toml"
    assert main(["calibrate", "--catalog", dec_toml, "--out", str(out), "--rows", "800000"]) == 0
    captured = capsys.readouterr()
    assert "cqopt calibrate: timing (synthetic)" in captured.err
    assert "equi_join" in captured.out and "4,000,000" in captured.out
    catalog, original = load_catalog(out), load_catalog(dec_toml)
    for kind, rate in RATES.items():
        assert getattr(catalog.operators, kind) == pytest.approx(rate, rel=1e-5)
    assert catalog.streams == original.streams and catalog.pipes == original.pipes
    text = out.read_text()
    assert text.startswith(cal.MARK) and "Spark test, master local[2]" in text
    assert "equi_join = 4000000.0  # was 3000; fixed 0.08 s" in text
    # A catalog cqopt calibrate wrote may be replaced; nobody else's file.
    assert main(["calibrate", "--catalog", dec_toml, "--out", str(out)]) == 0
    mine = tmp_path / "mine.toml"
    mine.write_text("# my catalog\n")
    capsys.readouterr()
    assert main(["calibrate", "--catalog", dec_toml, "--out", str(mine)]) == 2
    err = capsys.readouterr().err
    assert "exists and cqopt did not write it" in err and len(err.strip().splitlines()) == 1
    assert mine.read_text() == "# my catalog\n"


@pytest.mark.spark
def test_measure_times_every_kind_on_spark(spark, dec_catalog):
    steps = []
    began = time.perf_counter()
    timings = cal.measure(spark, dec_catalog, max_rows=4000, sizes=2, repeats=1,
                          say=steps.append)
    whole = time.perf_counter() - began
    assert set(timings) == set(cal.KINDS)
    for kind, points in timings.items():
        assert [rows for rows, _ in points] == ([4000, 8000] if kind == "equi_join"
                                                else [2000, 4000])
        assert all(0 < seconds < whole for _, seconds in points)  # a part of the whole
    assert any("warming up" in s for s in steps)
    assert "master local[2]" in cal.describe_spark(spark)


def test_smoothing_without_a_run_folder_is_refused_not_ignored(no_spark, examples, tmp_path,
                                                               capsys):
    """--smoothing weighs a fit from --from-run folders; alone it would do nothing, so it is
    one line before any work (and the Python call says the same)."""
    import cqopt
    from cqopt.errors import CqoptError

    out = tmp_path / "cal.toml"
    assert main(["calibrate", "--catalog", str(examples / "dec-pkt.toml"), "--out", str(out),
                 "--smoothing", "0.3"]) == 2
    err = capsys.readouterr().err.strip()
    assert "--smoothing 0.3 weighs a fit from run folders" in err and "--from-run DIR" in err
    assert len(err.splitlines()) == 1 and not out.exists()
    with pytest.raises(CqoptError, match="smoothing = 0.3 weighs a fit from run folders"):
        cqopt.calibrate(examples / "dec-pkt.toml", out, smoothing=0.3)
