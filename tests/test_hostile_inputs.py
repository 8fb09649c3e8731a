"""The user's contract under attack: bad statistics never wedge a query, and every error a
user can cause is one line on stderr, exit status 2, no traceback, no hang."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import warnings
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import cqopt.charts as charts
from cqopt.cli.main import EXAMPLES, build_parser, main
from cqopt.errors import CqoptError
from cqopt.optimizer.query.statistic_check import UnknownStatisticError, check_given
from cqopt.runtime.adaptive import AdaptiveQuery


@pytest.fixture(scope="module")
def chart_set(dec_toml, workload_toml, tmp_path_factory):
    out = tmp_path_factory.mktemp("hostile") / "charts"
    assert main(["build", "--catalog", dec_toml, "--workload", workload_toml, "--out",
                 str(out), "--engine", "local", "--k", "4", "--quiet"]) == 0
    return out


def _refused(capsys, argv: list[str]) -> str:
    """The one error line of ``cqopt argv``, refused by argparse or by the command."""
    return _one_line_error(capsys, main(argv))


def _one_line_error(capsys, code: int) -> str:
    captured = capsys.readouterr()
    assert code == 2, captured
    assert captured.err.startswith("cqopt: error: ") and captured.err.count("\n") == 1, \
        captured.err
    assert "\x1b" not in captured.err and "Traceback" not in captured.err
    return captured.err


# -- 2. a run time that survives bad statistics ---------------------------------------
@pytest.mark.parametrize("bad", [math.inf, math.nan, -1.0, "abc", 10**400, None])
def test_a_bad_observation_is_refused_and_the_query_keeps_going(chart_set, bad):
    aq = AdaptiveQuery(charts.load(chart_set), "Q1", estimator="last")
    first = aq.step({"rate.TCP": 400.0, "sel.TCP": 0.2})
    before = aq.estimate()
    with pytest.raises(CqoptError, match="rate.TCP") as info:
        aq.step({"rate.TCP": bad, "sel.TCP": 0.9})
    assert "round 1" in str(info.value) and "\n" not in str(info.value)
    assert aq.rounds == 1 and aq.estimate() == before  # nothing changed
    later = aq.step({"rate.TCP": 800.0, "sel.TCP": 0.9})  # a valid round works
    assert later.round == 1 and first.round == 0
    assert aq.step({"rate.TCP": 800.0}).estimate["rate.TCP"] == 800.0


@pytest.mark.parametrize("sel", [1.5, -0.1, float("nan"), float("inf")])
def test_a_selectivity_outside_zero_one_is_refused_and_the_estimate_kept(chart_set, sel):
    aq = AdaptiveQuery(charts.load(chart_set), "Q1", estimator="last")
    aq.step({"rate.TCP": 500.0, "sel.TCP": 0.25})
    with pytest.raises(CqoptError, match=r"round 1: statistic sel\.TCP .*refused"):
        aq.step({"rate.TCP": 700.0, "sel.TCP": sel})
    assert aq.rounds == 1 and aq.estimate() == {"sel.TCP": 0.25, "rate.TCP": 500.0}


def test_selectivity_outside_zero_one_and_drop_mode(chart_set):
    aq = AdaptiveQuery(charts.load(chart_set), "Q1", estimator="last", on_invalid="drop")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        outcome = aq.step({"rate.TCP": 500.0, "sel.TCP": 1.5})
    assert outcome.dropped == ("sel.TCP",) and "sel.TCP" in str(caught[0].message)
    assert aq.step({"rate.TCP": 500.0, "sel.TCP": 0.5}).dropped == ()
    assert aq.estimate()["sel.TCP"] == 0.5 and aq.estimate()["rate.TCP"] == 500.0


def test_a_statistic_the_query_lacks_is_refused_everywhere(chart_set, capsys):
    loaded = charts.load(chart_set)
    aq = AdaptiveQuery(loaded, "Q1")
    for call in (lambda: aq.step({"rate.TPC": 1.0}),
                 lambda: loaded.choose("Q1", {"rate.TCP": 1, "sel.TCP": 0.1, "rate.TPC": 1}),
                 lambda: loaded.choose_many("Q1", {"rate.TCP": [1.0], "sel.TCP": [0.1],
                                                   "rate.TPC": [1.0]})):
        with pytest.raises(UnknownStatisticError, match=r"no statistic rate.TPC \(did you "
                                                        r"mean rate.TCP\?\).*does not use"):
            call()
    assert aq.rounds == 0
    err = _one_line_error(capsys, main(["choose", "--charts", str(chart_set), "--query", "Q1",
                                        "--stat", "rate.TCP=1", "--stat", "sel.TCP=0.1",
                                        "--stat", "rate.TPC=5"]))
    assert "the chart does not use rate.TPC" in err


def test_choose_warns_about_fixed_statistics_and_a_stale_chart_set(chart_set, examples,
                                                                  capsys):
    assert main(["choose", "--charts", str(chart_set), "--query", "Q2",
                 "--stat", "rate.TCP=100", "--stat", "rate.UDP=100", "--stat", "rate.SF=100",
                 "--stat", "jsel.TCP.UDP=0.5",
                 "--catalog", str(examples / "epa-http.toml"), "--allow-stale"]) == 0
    err = capsys.readouterr().err
    assert "does not use jsel.TCP.UDP (fixed at" in err
    assert "stale" in err


def test_wrong_types_name_the_statistic(chart_set):
    loaded = charts.load(chart_set)
    for stats in ({"rate.TCP": "abc", "sel.TCP": 0.1}, {"rate.TCP": 10**400, "sel.TCP": 0.1}):
        with pytest.raises(CqoptError, match="statistic rate.TCP"):
            loaded.choose("Q1", stats)
    for stats in ({"rate.TCP": np.array(["a", "b"]), "sel.TCP": 0.1},
                  {"rate.TCP": [10**400], "sel.TCP": [0.1]}):
        with pytest.raises(CqoptError, match="statistic rate.TCP"):
            loaded.choose_many("Q1", stats)


def test_check_given_returns_what_the_chart_does_not_use():
    assert check_given(["rate.A", "sel.A"], ["rate.A", "sel.A"], ["rate.A"],
                       where="query Q") == ("sel.A",)


# -- arithmetic that cannot wedge: extreme finite values over many rounds ---------------
_EXTREMES = [0.0, -0.0, 5e-324, 2.2250738585072014e-308, 1e-300, 0.5, 1.0, 0.9999999999999999,
             1.0000000000000002, 1e15, 999999999999999.9, 1.000000000000001e15, 1e300, 1e308,
             1.7976931348623157e308, math.inf, math.nan, -5e-324, 500.0]


def _toy_chart():
    from types import SimpleNamespace as Plan

    from cqopt.charts.lookup import QueryChart
    from cqopt.charts.spec import Axis, ChartSpec

    spec = ChartSpec("q", "SELECT 1", (Axis("rate.S", 0.0, 1000.0, 2), Axis("sel.S", 0.0, 1.0, 2),
                                       Axis("jsel.S.T", 0.0, 0.2, 2)))
    return QueryChart(spec, [Plan(id="A"), Plan(id="B")], np.array([0, 1, 1, 0, 1, 0, 0, 1]),
                      np.zeros(8))


def _toy_costs(stats):
    """Both plans' utility, vectorized: A grows with the selectivity, B with its complement."""
    r, s, j = (np.asarray(stats[n], dtype=float) for n in ("rate.S", "sel.S", "jsel.S.T"))
    return np.stack([r * s + j, r * (1 - s) + 1])


def _valid(name, x):
    from cqopt.catalog.catalog import MAX_RATE

    return 0.0 <= x <= (MAX_RATE if name == "rate.S" else 1.0)


@pytest.mark.parametrize("estimator", ["decay", "last", "ewma", "holt", "median", "kalman"])
@pytest.mark.parametrize("policy", [{}, {"choice": "expected", "fallback": 3},
                                    {"hysteresis": "margin"}])
def test_extreme_finite_values_never_wedge_a_query(estimator, policy):
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    from cqopt.optimizer.query.errors import QueryError
    from cqopt.runtime.adaptive import Hysteresis

    value = st.one_of(st.sampled_from(_EXTREMES), st.floats(allow_nan=True, allow_infinity=True))
    rounds = st.lists(st.fixed_dictionaries({"rate.S": value, "sel.S": value,
                                             "jsel.S.T": value}), min_size=1, max_size=40)

    @settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
    @given(rounds=rounds)
    def run(rounds):
        options = dict(policy)
        if options.pop("hysteresis", None):
            options.update(hysteresis=Hysteresis(0.05, 2),
                           cost=lambda plan, stats: float(_toy_costs(stats)["AB".index(plan.id)]))
        if options:
            options["plan_costs"] = _toy_costs
        aq = AdaptiveQuery(_toy_chart(), estimator=estimator, **options)
        for stats in rounds:
            before = (aq.rounds, aq.moves, aq.switches, aq.estimate(), aq.cell, aq.plan)
            try:
                aq.step(stats)
            except QueryError:
                assert not all(_valid(n, x) for n, x in stats.items()), stats
                assert (aq.rounds, aq.moves, aq.switches, aq.estimate(), aq.cell,
                        aq.plan) == before
            else:
                assert all(_valid(n, x) for n, x in stats.items()), stats
            assert all(_valid(n, x) for n, x in aq.estimate().items()), aq.estimate()
        # and a valid round still works after all of them
        assert aq.step({"rate.S": 500.0, "sel.S": 0.5, "jsel.S.T": 0.1}).round == aq.rounds - 1

    run()


def test_the_largest_float_is_refused_and_the_estimate_stays_put():
    aq = AdaptiveQuery(_toy_chart(), estimator="decay")
    aq.step({"rate.S": 500.0, "sel.S": 0.5})
    for _ in range(6):
        with pytest.raises(CqoptError, match="at most 1e\\+15"):
            aq.step({"rate.S": 1.7976931348623157e308, "sel.S": 0.5})
    assert aq.rounds == 1 and aq.estimate()["rate.S"] == 500.0
    for _ in range(200):
        outcome = aq.step({"rate.S": 500.0, "sel.S": 0.5})
    assert outcome.estimate["rate.S"] == pytest.approx(500.0) and aq.rounds == 201


def test_a_step_whose_cost_function_fails_changes_nothing():
    calls = []

    def flaky(stats):
        calls.append(1)
        if len(calls) == 3:  # the third round
            raise RuntimeError("the cost service is down")
        return _toy_costs(stats)

    aq = AdaptiveQuery(_toy_chart(), estimator="last", fallback=2, plan_costs=flaky)
    aq.step({"rate.S": 900.0, "sel.S": 0.9})
    aq.step({"rate.S": 100.0, "sel.S": 0.1})
    before = (aq.rounds, aq.moves, aq.switches, aq.estimate(), aq.cell, aq.plan,
              list(aq.fallback.chart_costs), dict(aq._observed))
    with pytest.raises(RuntimeError):
        aq.step({"rate.S": 700.0, "sel.S": 0.7})
    assert (aq.rounds, aq.moves, aq.switches, aq.estimate(), aq.cell, aq.plan,
            list(aq.fallback.chart_costs), dict(aq._observed)) == before
    assert aq.step({"rate.S": 700.0, "sel.S": 0.7}).round == 2


# -- 3. one line, exit 2, never a traceback, never a hang -----------------------------
def test_huge_literal_and_control_characters(dec_toml, capsys):
    base = ["explain", "--catalog", dec_toml, "--sql"]
    _one_line_error(capsys, main([*base, f"SELECT * FROM TCP WHERE TCP.bytes = {'9' * 5000} "
                                         "WINDOW [1]"]))
    err = _one_line_error(capsys, main([*base, "SELECT * FROM TCP WHERE TCP.dest_host = "
                                               "'a\nb\x1b[31m' WINDOW [1]"]))
    assert "\\n" in err and ("\\x1b" in err or "\\033" in err)


@pytest.mark.parametrize("sql", [
    "SELECT * FROM TCP WHERE 1 IN (" + ", ".join(map(str, range(9000))) + ") WINDOW [1]",
    "SELECT * FROM TCP WHERE TCP.dest_host = '" + "x" * 200_000 + "' + 1 WINDOW [1]",
    "SELECT * FROM TCP WHERE " + "TCP.bytes + " * 20_000 + "1 > 2 WINDOW [1]",
])
def test_an_error_quotes_a_few_hundred_characters_of_the_input(dec_toml, capsys, sql):
    from cqopt.errors import MAX_ERROR_CHARS

    err = _one_line_error(capsys, main(["explain", "--catalog", dec_toml, "--sql", sql]))
    assert len(err) <= len("cqopt: error: \n") + MAX_ERROR_CHARS, len(err)
    assert "characters" in err  # says how much it left out


def test_an_overlong_option_value_is_quoted_short(dec_toml, capsys):
    # --model is judged by the model registry (not argparse's choices): a CqoptError.
    assert main(["explain", "--catalog", dec_toml, "--sql", "SELECT TCP.src_host FROM TCP "
                 "WINDOW [1]", "--model", "m" * 100_000]) == 2
    err = capsys.readouterr().err
    assert "the registered models are " in err and "pipes" in err
    assert err.startswith("cqopt: error: ") and err.count("\n") == 1 and len(err) < 700


def test_h_as_an_option_value_is_one_line(dec_toml, capsys):
    assert main(["explain", "--catalog", dec_toml, "--sql", "-h"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("cqopt: error: argument --sql") and err.count("\n") == 1


@pytest.mark.parametrize("target", ["fifo", "/dev/zero"])
def test_a_fifo_or_device_in_place_of_a_chart_file_does_not_hang(chart_set, tmp_path,
                                                                  capsys, target):
    import shutil

    bad = tmp_path / "bad"
    shutil.copytree(chart_set, bad)
    victim = bad / ("manifest.json" if target == "fifo" else "Q1.parquet")
    victim.unlink()
    if target == "fifo":
        os.mkfifo(victim)
    else:
        victim.symlink_to(target)
    code = main(["choose", "--charts", str(bad), "--query", "Q1", "--stat", "rate.TCP=1",
                 "--stat", "sel.TCP=0.1"])
    assert "regular file" in _one_line_error(capsys, code)


def test_explain_into_a_closed_pipe_exits_quietly(dec_toml):
    sql = "SELECT * FROM TCP, UDP, SF WHERE TCP.src_host = UDP.dest_host AND " \
          "UDP.dest_host = SF.dest_host WINDOW [1]"
    shell = (f"{sys.executable} -m cqopt explain --catalog {dec_toml} --sql '{sql}' "
             "| head -1")
    done = subprocess.run(["bash", "-c", shell], capture_output=True, text=True, timeout=120)
    assert done.stdout.startswith("== query") and done.stderr == ""


def test_generate_refuses_huge_allocations_and_truncated_gzip(dec_toml, tmp_path, capsys):
    import gzip

    base = ["generate", "--catalog", dec_toml, "--out", str(tmp_path / "t")]
    assert "at most" in _one_line_error(capsys, main([*base, "--duration", "1e12"]))
    _refused(capsys, [*base, "--duration", "nan"])
    tiny = tmp_path / "tiny.csv"
    tiny.write_text("gap\n1e-300\n1e-300\n")
    assert "at most" in _one_line_error(capsys, main([*base, "--interarrivals", str(tiny)]))
    truncated = tmp_path / "gaps.csv.gz"
    rows = "".join(f"{x:.6f}\n" for x in np.random.default_rng(0).uniform(0, 1, 5000))
    whole = gzip.compress(("gap\n" + rows).encode())
    truncated.write_bytes(whole[: len(whole) // 2])
    _one_line_error(capsys, main([*base, "--interarrivals", str(truncated)]))
    assert not (tmp_path / "t").exists()


@pytest.mark.parametrize("source", ["/dev/zero", "fifo", "directory"])
def test_generate_reads_no_device_fifo_or_folder_as_interarrivals(dec_toml, tmp_path, capsys,
                                                                  source):
    if source == "fifo":
        source = str(tmp_path / "gaps.csv")
        os.mkfifo(source)  # no writer: reading it would wait forever
    elif source == "directory":
        source = str(tmp_path)
    err = _refused(capsys, ["generate", "--catalog", dec_toml, "--out", str(tmp_path / "t"),
                            "--interarrivals", source])
    assert "regular file" in err and not (tmp_path / "t").exists()


def test_generate_stops_reading_a_gzip_that_expands_past_the_bound(dec_toml, tmp_path, capsys,
                                                                   monkeypatch):
    import gzip

    from cqopt.replay import trace_generate

    monkeypatch.setattr(trace_generate, "MAX_INTERARRIVAL_BYTES", 100_000)
    bomb = tmp_path / "gaps.csv.gz"
    bomb.write_bytes(gzip.compress(b"gap\n" + b"0.001\n" * 50_000))  # 300 KB of text
    assert bomb.stat().st_size < 10_000
    err = _refused(capsys, ["generate", "--catalog", dec_toml, "--out", str(tmp_path / "t"),
                            "--interarrivals", str(bomb)])
    assert "more than 100000 bytes" in err


def test_generate_bounds_the_files_per_round_before_writing(dec_toml, tmp_path, capsys):
    out = tmp_path / "t"
    err = _refused(capsys, ["generate", "--catalog", dec_toml, "--out", str(out), "--duration",
                            "5", "--file-per-round", "1e-9"])
    assert "at most 100,000" in err and "--file-per-round" in err
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_fidelity_reads_no_device_as_a_trace(dec_toml, workload_toml, tmp_path, capsys,
                                             no_spark):
    err = _refused(capsys, ["fidelity", "--catalog", dec_toml, "--workload", workload_toml,
                            "--trace", "TCP=/dev/zero", "--out", str(tmp_path / "r")])
    assert "--trace TCP=/dev/zero: not a regular file or folder" in err


def test_traces_are_matched_exactly_and_two_candidates_are_an_error(dec_toml, workload_toml,
                                                                    tmp_path, capsys):
    from cqopt.api import trace_paths
    from cqopt.catalog import load_catalog

    catalog = load_catalog(dec_toml)
    folder = tmp_path / "traces"
    folder.mkdir()
    for name in ("TCP.parquet", "TCP.backup.csv", "udp.csv.gz", "notes.md", ".hidden.csv"):
        (folder / name).write_text("x")
    paths = trace_paths(catalog, trace_dir=str(folder))
    assert paths == {"TCP": str(folder / "TCP.parquet"), "UDP": str(folder / "udp.csv.gz")}
    assert "skipped TCP.backup.csv, notes.md" in capsys.readouterr().err
    (folder / "TCP.csv").write_text("x")
    with pytest.raises(CqoptError, match="2 traces for stream TCP: TCP.csv, TCP.parquet"):
        trace_paths(catalog, trace_dir=str(folder))


def test_an_option_that_cannot_apply_is_an_error(dec_toml, workload_toml, chart_set,
                                                 tmp_path, capsys):
    (tmp_path / "TCP.csv").write_text("ts\n1\n")
    code = main(["fidelity", "--catalog", dec_toml, "--workload", workload_toml, "--charts",
                 str(chart_set), "--k", "3", "--traces", str(tmp_path), "--out",
                 str(tmp_path / "r")])
    assert "--k 3" in _one_line_error(capsys, code)


def test_a_timestamp_of_1e300_is_refused_before_spark_counts_rounds():
    from cqopt.api import check_span

    infos = {"TCP": SimpleNamespace(start=0.0, end=1e300, path="TCP.csv")}
    with pytest.raises(CqoptError, match="check the timestamps"):
        check_span("Q1", infos, 1.0, None)
    check_span("Q1", {"TCP": SimpleNamespace(start=0.0, end=600.0, path="x")}, 1.0, None)


# -- numbers on the command line: ASCII, finite, in range, one reader -----------------
def _options():
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    for name, command in sub.choices.items():
        for action in command._actions:
            if action.option_strings:
                yield name, action


def test_no_option_reads_numbers_with_float_or_int():
    # float() and int() take "nan", "inf", "1_0" and "٥"; every number goes through
    # cqopt.cli.options.number (cqopt.errors.parse_number)
    bare = {f"{name} {action.option_strings[0]}" for name, action in _options()
            if action.type in (float, int)}
    assert not bare, bare


@pytest.mark.parametrize("argv, fragment", [
    (["explain", "--catalog", "c", "--sql", "SELECT * FROM TCP WINDOW [1]", "--stat",
      "rate.TCP=\u0665"], "ASCII digits"),
    (["choose", "--charts", "c", "--query", "Q1", "--stat", "rate.TCP=\u0665"], "ASCII digits"),
    (["explain", "--catalog", "c", "--sql", "q", "--sql-out", ""], "unknown SQL dialect ''"),
    (["choose", "--charts", "c", "--query", "Q1", "--sql", "nosuch"], "unknown SQL dialect"),
    (["run", "--tolerance", "nan"], "--tolerance 'nan'"),
    (["run", "--tolerance-ms", "-5"], "--tolerance-ms '-5': needs a number >= 0"),
    (["run", "--max-rounds", "-1"], "--max-rounds '-1': needs a number >= 1"),
    (["calibrate", "--rows", "-1"], "--rows '-1': needs a number >= 1000"),
    (["calibrate", "--sizes", "0"], "--sizes '0': needs a number >= 3"),
    (["calibrate", "--repeats", "0"], "--repeats '0': needs a number >= 1"),
    (["fidelity", "--d", "1000000000"], "--d '1000000000': needs a number <= 100000"),
    (["generate", "--duration", "inf"], "--duration 'inf'"),
    (["generate", "--seed", "1.5"], "whole number"),
    (["generate", "--offset", "1e999"], "too large"),
    (["generate", "--catalog", "c", "--out", "o", "--steady", "UDP.dest_host=\u0665"],
     "ASCII digits"),
    (["build", "--catalog", "c", "--workload", "w", "--out", "o", "--k", "\u0665"],
     "ASCII digits"),
    (["fidelity", "--k", "1_0"], "ASCII digits"),
    (["fidelity", "--catalog", "c", "--workload", "w", "--traces", "t", "--out", "o",
      "--k-sweep", "2,\u0665"], "--k-sweep '2,\u0665': expected whole numbers in ASCII"),
    (["explain", "--catalog", "c", "--sql", "SELECT * FROM TCP WINDOW [1]", "--weights",
      "\u0660.4,\u0660.6"], "--weights '\u0660.4,\u0660.6': expected WR,WM"),
])
def test_a_hostile_number_is_one_line_before_any_work(argv, fragment, capsys, dec_toml):
    argv = [a if a != "c" or argv[0] == "choose" else dec_toml for a in argv]
    err = _refused(capsys, argv)
    assert fragment in err, err


@settings(max_examples=200, deadline=None)
@given(text=st.one_of(
    st.sampled_from(["nan", "NaN", "inf", "-inf", "1e999", "-1e999", "1_000", "0x10", "", " ",
                     "\u0665", "\u00b2", "\uff15", "1e-400", "-0", "+5", "5.", ".5", "1e308",
                     "9" * 40, "1" + "0" * 5000]),
    st.text(alphabet="0123456789.eE+-_ \u0665\u00b2nafi", max_size=12)))
def test_every_numeric_option_reads_only_finite_ascii_numbers(text):
    import argparse

    from cqopt.errors import DECIMAL

    for name, action in _options():
        if getattr(action.type, "__name__", "") not in ("number", "whole number"):
            continue
        try:
            value = action.type(text)
        except argparse.ArgumentTypeError as err:
            assert "\n" not in str(err) and len(str(err)) < 200
            continue
        body = text.strip().lstrip("+-")
        assert DECIMAL.fullmatch(body) and math.isfinite(value), (name, action.dest, text)


# -- every option checked before Spark starts ------------------------------------------
@pytest.fixture
def no_spark(monkeypatch):
    """Fail the test if a command gets as far as starting Spark."""
    import cqopt.spark.session as session

    def refuse(*args, **kwargs):
        raise AssertionError("Spark was started before the options were checked")
    monkeypatch.setattr(session, "running_session", refuse)
    monkeypatch.setattr(session, "spark_session", refuse)


@pytest.mark.parametrize("option, fragment", [
    (["--driver-memory", "lots"], "--driver-memory 'lots': expected a size such as 512m"),
    (["--driver-memory", "1024"], "a whole number and k, m, g or t"),
    (["--driver-memory", "100000t"], "more than this machine's"),
    (["--driver-memory", "16m"], "512m or more"),
    (["--rows", "-1"], "--rows '-1': needs a number >= 1000"),
    (["--sizes", "0"], "--sizes '0': needs a number >= 3"),
    (["--repeats", "0"], "--repeats '0': needs a number >= 1"),
])
def test_calibrate_checks_every_option_before_spark(dec_toml, tmp_path, capsys, no_spark,
                                                    option, fragment):
    err = _refused(capsys, ["calibrate", "--catalog", dec_toml, "--out",
                            str(tmp_path / "c.toml"), *option])
    assert fragment in err, err


@pytest.fixture
def trace_dir(tmp_path):
    folder = tmp_path / "tcp"
    folder.mkdir()
    (folder / "part-00000.csv").write_text("ts,src_host\n0.5,1\n")
    return folder


@pytest.mark.parametrize("case", ["user folder", "a file", "missing source", "max rounds",
                                  "trigger", "rate"])
def test_run_checks_every_option_before_spark(dec_toml, workload_toml, chart_set, tmp_path,
                                              trace_dir, capsys, no_spark, case):
    out = tmp_path / "mine"
    sources = ["--source", f"TCP={trace_dir}"]
    extra, fragment = [], None
    if case == "user folder":
        out.mkdir()
        (out / "thesis.tex").write_text("mine")
        fragment = "is not a cqopt run folder"
    elif case == "a file":
        out.write_text("mine")
        fragment = "is a file"
    elif case == "missing source":
        sources += ["--query", "Q2"]
        fragment = "no --source for streams UDP, SF of query Q2"
    elif case == "max rounds":
        extra, fragment = ["--max-rounds", "-1"], "--max-rounds '-1': needs a number >= 1"
    elif case == "trigger":
        extra, fragment = ["--trigger", "\u0665"], "--trigger"
    else:
        sources, fragment = ["--source", "TCP=rate:\u0665"], "rate:"
    argv = ["run", "--catalog", dec_toml, "--workload", workload_toml, "--charts",
            str(chart_set), "--out", str(out), *sources, *extra]
    if "--query" not in argv:
        argv += ["--query", "Q1"]
    err = _refused(capsys, argv)
    assert fragment in err, err
    if case == "user folder":
        assert [p.name for p in out.iterdir()] == ["thesis.tex"]


@pytest.mark.parametrize("where", ["missing folder", "a folder"])
def test_show_creates_no_folder_for_its_image(chart_set, tmp_path, capsys, where):
    out = tmp_path / "nonexistent" / "x.png" if where == "missing folder" else tmp_path / "d.png"
    if where == "a folder":
        out.mkdir()
    err = _refused(capsys, ["show", "--charts", str(chart_set), "--query", "Q1", "--out",
                            str(out)])
    assert ("does not exist" if where == "missing folder" else "is a folder") in err
    assert not (tmp_path / "nonexistent").exists()


_SESSION = """
import os, sys, time
from cqopt.spark.session import running_session
with running_session("local[1]", progress=False):
    from pyspark import SparkContext
    print(SparkContext._gateway.proc.pid, flush=True)
    time.sleep(600)
"""


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.parametrize("signum", [15, 2])  # SIGTERM, SIGINT
def test_a_killed_command_takes_its_jvm_with_it(signum):
    driver = subprocess.Popen([sys.executable, "-c", _SESSION], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    try:
        jvm = int(driver.stdout.readline())
        os.kill(jvm, 0)  # running
        driver.send_signal(signum)
        driver.wait(timeout=120)
    finally:
        if driver.poll() is None:
            driver.kill()
    with pytest.raises(ProcessLookupError):  # ended with the driver, not seconds later
        os.kill(jvm, 0)


@pytest.mark.spark
@pytest.mark.slow
def test_a_jvm_that_cannot_start_is_one_line():
    script = ("from cqopt.spark.session import spark_session\n"
              "from cqopt.errors import CqoptError\n"
              "try:\n"
              "    spark_session('local[1]', conf={'spark.driver.memory': 'lots'})\n"
              "except CqoptError as err:\n"
              "    print('refused:', err)\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=300)
    assert done.stdout.startswith("refused:") and done.stdout.count("\n") == 1, done
    assert "Invalid maximum heap size: -Xmxlots" in done.stdout
    assert done.stderr == "", done.stderr  # nothing of the JVM's own reaches the console


_HOSTILE = ["nan", "-inf", "1e999", "-1", "0", "\u0665", "1_0", "", " ", "0x10", "1e-320",
            "9" * 30, "x" * 5000, "\x1b[31m", "a\nb", "-h", "=", "rate.TCP=", "=5",
            "rate.TCP=\u0665", "rate.TCP=1e16", "sel.TCP=nan", "lots", "1024", "2.5"]
_FUZZED = {
    "explain": (["--sql", "SELECT * FROM TCP WHERE TCP.dest_host = 2 WINDOW [1]"],
                ["--stat", "--model", "--weights", "--sql-out"]),
    "choose": (["--query", "Q1"], ["--stat", "--sql", "--query"]),
    "generate": (["--duration", "1", "--streams", "UDP"],
                 ["--duration", "--seed", "--rate-cv", "--offset", "--file-per-round",
                  "--rate-scale", "--steady", "--streams", "--interarrivals"]),
    "calibrate": ([], ["--rows", "--sizes", "--repeats", "--driver-memory", "--master"]),
    "run": (["--query", "Q1"], ["--max-rounds", "--tolerance", "--tolerance-ms", "--d",
                                "--decay", "--residuals", "--fallback", "--margin", "--trigger",
                                "--source", "--horizon", "--hold-rounds"]),
}


@settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_a_hostile_command_line_is_a_result_or_one_line(data, dec_toml, workload_toml,
                                                        chart_set, tmp_path_factory,
                                                        monkeypatch):
    import contextlib
    import io

    import cqopt.spark.session as session

    class SparkReached(Exception):
        pass

    def reached(*args, **kwargs):
        raise SparkReached
    monkeypatch.setattr(session, "running_session", reached)
    command = data.draw(st.sampled_from(sorted(_FUZZED)))
    base, options = _FUZZED[command]
    tmp = tmp_path_factory.mktemp("fuzz")
    argv = [command, *base]
    for option in data.draw(st.lists(st.sampled_from(options), min_size=1, max_size=3)):
        argv += [option, data.draw(st.sampled_from(_HOSTILE))]
    argv += {"explain": ["--catalog", dec_toml],
             "choose": ["--charts", str(chart_set)],
             "generate": ["--catalog", dec_toml, "--out", str(tmp / "t")],
             "calibrate": ["--catalog", dec_toml, "--out", str(tmp / "c.toml")],
             "run": ["--catalog", dec_toml, "--workload", workload_toml, "--charts",
                     str(chart_set), "--out", str(tmp / "r")]}[command]
    err, out = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        try:
            code = main(argv)
        except SparkReached:  # every option was valid: Spark would start now
            code = "spark"
    text = err.getvalue()
    assert "Traceback" not in text and "\x1b" not in text, argv
    if code == 2:
        assert text.startswith("cqopt: error: ") and text.count("\n") == 1, (argv, text)
        assert len(text) < 800
    else:
        assert code in (0, "spark"), (argv, code, text)


# -- 4. help --------------------------------------------------------------------------
def test_every_subcommand_help_ends_with_a_worked_example():
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    assert set(sub.choices) == set(EXAMPLES)
    for name, command in sub.choices.items():
        text = command.format_help().rstrip()
        assert text.endswith(EXAMPLES[name].rstrip()) and f"cqopt {name} " in EXAMPLES[name]
    fidelity = sub.choices["fidelity"].format_help()
    assert fidelity.count("alternative") >= 2


# -- Spark's console ------------------------------------------------------------------
@pytest.mark.spark
@pytest.mark.slow
def test_nothing_from_spark_reaches_the_console_on_a_corrupt_gzip_trace(dec_toml, tmp_path):
    import gzip

    trace = tmp_path / "TCP.csv.gz"
    # Varied rows, so the compressed file is long enough that cutting it in half truncates
    # it (a repeated row compresses to a couple of hundred bytes).
    rows = "".join(f"{i * 0.001:.3f},{(i * 7919) % 1000}\n" for i in range(20000))
    whole = gzip.compress(("ts,src_host\n" + rows).encode())
    assert len(whole) > 10000
    trace.write_bytes(whole[:len(whole) // 2])
    script = (
        "from cqopt.spark.session import spark_session\n"
        "from cqopt.spark.trace_read import read_trace\n"
        "from cqopt.catalog import load_catalog\n"
        "from cqopt.errors import CqoptError\n"
        f"stream = load_catalog({dec_toml!r}).stream('TCP')\n"
        "spark = spark_session('local[1]')\n"
        "try:\n"
        f"    read_trace(spark, {str(trace)!r}, stream)\n"
        "except CqoptError as err:\n"
        "    print('refused', err)\n"
        "spark.stop()\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=600, env={k: v for k, v in os.environ.items()
                                            if k != "CQOPT_SPARK_LOG"})
    assert done.stdout.startswith("refused"), done
    assert done.stderr == "", done.stderr[:2000]


# -- strict JSON: what cqopt reads of its own files -----------------------------------
_JSON_LEAVES = (st.none() | st.booleans() | st.integers(-10**45, 10**45)
                | st.floats(allow_nan=False, allow_infinity=False)
                | st.text(alphabet='[]{}"\\e1-+ ab', max_size=8))
_JSON_VALUES = st.recursive(_JSON_LEAVES, lambda inner: st.lists(inner, max_size=4)
                            | st.dictionaries(st.text(alphabet='[]{}"\\ab', max_size=4),
                                              inner, max_size=4), max_leaves=30)


def _depth(value) -> int:
    if isinstance(value, list):
        return 1 + max(map(_depth, value), default=0)
    if isinstance(value, dict):
        return 1 + max(map(_depth, value.values()), default=0)
    return 0


def _long_int(value) -> bool:
    if isinstance(value, list):
        return any(map(_long_int, value))
    if isinstance(value, dict):
        return any(map(_long_int, value.values()))
    return type(value) is int and abs(value) >= 10**40


@settings(max_examples=300, deadline=None)
@given(value=_JSON_VALUES, wrap=st.integers(0, 230), in_string=st.booleans())
def test_parse_json_takes_what_json_takes_and_refuses_depth_and_long_integers(
        value, wrap, in_string):
    """parse_json's shortcuts (no float hook, no walk, where a scan of the text says none
    is needed) never let through what the walk refuses: nesting past 200 levels,
    whatever brackets, quotes and backslashes its strings hold, and integers of more
    than 40 digits; everything else reads as json.loads reads it."""
    from cqopt.errors import MAX_JSON_DEPTH, parse_json

    for _ in range(wrap):
        value = [value, "]]}}" if in_string else 0]
    text = json.dumps(value)
    if _depth(value) > MAX_JSON_DEPTH or _long_int(value):
        with pytest.raises(ValueError):
            parse_json(text)
    else:
        assert parse_json(text) == json.loads(text)


def test_parse_json_of_a_large_text_keeps_its_refusals():
    """A text past the numpy scan's size (a marker's inventory) is judged conservatively,
    in constant memory: the same refusals, the same values."""
    from cqopt.errors import _SCAN_BYTES, parse_json

    inventory = [{"path": f"/x/part-{i}.parquet", "size": i, "rate": i / 7} for i in range(40000)]
    text = json.dumps(inventory)
    assert len(text) > _SCAN_BYTES and parse_json(text) == inventory
    padding = json.dumps("]" * _SCAN_BYTES)  # brackets in a string do not hide the depth
    with pytest.raises(ValueError, match="nested deeper than 200"):
        parse_json("[" * 201 + padding + "]" * 201)
    with pytest.raises(ValueError, match="a number of 45 digits"):
        parse_json(f"[{padding}, {'9' * 45}]")
    with pytest.raises(ValueError, match="out of range"):
        parse_json(f"[{padding}, 1e400]")
