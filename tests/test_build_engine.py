"""One build orchestrator: the engine that costs cells is a parameter."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest

from cqopt.charts.build import LocalEngine, build_charts, build_local
from cqopt.charts.refine import RefineError
from cqopt.charts.spec import Axis, ChartSpec

Q1 = "SELECT TCP.src_host FROM TCP WHERE TCP.dest_host = 2 WINDOW [1]"


class RecordingEngine(LocalEngine):
    """The local engine, noting what the orchestrator asks of it."""

    def __init__(self):
        super().__init__(progress=False)
        self.calls: list[str] = []

    def running(self):
        self.calls.append("start")
        return contextlib.nullcontext()

    def cost_grids(self, contexts):
        self.calls.append(f"grids {len(contexts)}")
        return super().cost_grids(contexts)

    def cost_points(self, context, stats):
        self.calls.append("points")
        return super().cost_points(context, stats)


@pytest.fixture
def specs():
    return [ChartSpec(name, Q1, (Axis("sel.TCP", 0, 1, 4), Axis("rate.TCP", 10, 1000, 3)))
            for name in ("a", "b")]


def test_a_grid_build_asks_the_engine_once_for_every_chart(dec_catalog, specs):
    engine = RecordingEngine()
    charts = build_charts(specs, dec_catalog, engine)
    assert engine.calls == ["start", "grids 2"]
    local = build_local(specs, dec_catalog, progress=False)
    assert all(np.array_equal(c.plan_index, l.plan_index) for c, l in zip(charts, local))


def test_a_refined_build_asks_the_engine_for_points_and_reduces_in_process(dec_catalog, specs):
    engine = RecordingEngine()
    charts = build_charts(specs[:1], dec_catalog, engine, refine=16, reduce=0.1)
    assert engine.calls[0] == "start" and set(engine.calls[1:]) == {"points"}
    assert charts[0].leaves is not None and charts[0].reduction["lambda"] == 0.1


def test_every_setting_is_checked_before_the_engine_starts(dec_catalog, specs):
    engine = RecordingEngine()
    with pytest.raises(RefineError, match="below the 4 corner regions"):
        build_charts(specs, dec_catalog, engine, refine=3)
    with pytest.raises(ValueError, match="unknown cost model"):
        build_charts([ChartSpec("c", Q1, specs[0].axes, model="nope")], dec_catalog, engine)
    assert engine.calls == []


def test_progress_off_a_terminal_is_plain_lines(capsys):
    """issue 21: no carriage-return bar when stderr is not a terminal (a log, CI)."""
    from cqopt.progress import counter

    with counter("Q1", 1000, "cells costed") as done:
        for n in (100, 150, 350, 400):
            done(n)
    err = capsys.readouterr().err
    assert "\r" not in err
    assert err.splitlines() == ["  Q1: 0 of 1,000 cells costed", "  Q1: 250 of 1,000 cells costed",
                                "  Q1: 600 of 1,000 cells costed",
                                "  Q1: 1,000 of 1,000 cells costed"]
    with counter("Q1", 1000, "cells costed", enabled=False) as done:  # --quiet
        done(1000)
    assert capsys.readouterr().err == ""


def test_progress_on_a_terminal_is_one_bar_redrawn(monkeypatch):
    """On a terminal the counted work is a tqdm bar (redrawn in place with a carriage return)."""
    import io

    from cqopt.progress import counter

    pytest.importorskip("tqdm", reason="tqdm comes with the spark and all extras")
    screen = io.StringIO()
    monkeypatch.setattr(screen, "isatty", lambda: True, raising=False)
    with counter("Q1", 10, "cells costed", stream=screen) as done:
        for _ in range(10):
            done(1)
    assert "\r" in screen.getvalue() and "10/10" in screen.getvalue()
