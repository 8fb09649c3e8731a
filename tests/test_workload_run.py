"""cqopt run --workload: several queries in one streaming query, each as its own run would.

Four queries over the example's streams (a selection on TCP with W = 1 s, the
three-way join with W = 1 s, a count on UDP with W = 2 s, and a count per host
of Q1's selection, which shares Q1's work), charts of k = 4, a few seconds of
traces: a few rounds each.
"""

from __future__ import annotations

import json
import re
import socket
import threading
from pathlib import Path

import pandas as pd
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from cqopt.catalog import load_catalog
from cqopt.charts.spec import workload_specs
from cqopt.charts.workload import load_workload
from cqopt.cli.main import main
from cqopt.replay.trace_generate import generate_trace
from cqopt.replay.trace_write import write_trace_per_round

Q3 = """
[[query]]
name = "Q3"
sql = \"\"\"
SELECT COUNT(*) FROM UDP WHERE UDP.bytes > 500 WINDOW [2]
\"\"\"

[[query]]
name = "Q5"
sql = \"\"\"
SELECT TCP.src_host, COUNT(*) FROM TCP WHERE TCP.dest_host = 2 GROUP BY TCP.src_host WINDOW [1]
\"\"\"
"""


@pytest.fixture(scope="module")
def three(examples, tmp_path_factory):
    """The example workload plus Q3, its charts (k = 4), and 4 s of the three streams."""
    import cqopt.charts as charts
    from cqopt.charts.build import build_local
    from cqopt.charts.store import write_chart_set

    folder = tmp_path_factory.mktemp("workload-run")
    text = (examples / "workload.toml").read_text().replace("k = 10", "k = 4") + Q3
    (folder / "workload.toml").write_text(text)
    catalog = load_catalog(examples / "dec-pkt.toml")
    specs = workload_specs(load_workload(folder / "workload.toml"), catalog)
    write_chart_set(folder / "charts", build_local([s for s, _ in specs], catalog,
                                                   progress=False), catalog)
    keys = {"TCP": {"src_host": 40}, "UDP": {"dest_host": 40}, "SF": {"dest_host": 40}}
    for i, (stream, rate) in enumerate((("TCP", 200.0), ("UDP", 60.0), ("SF", 80.0))):
        trace = generate_trace(catalog.stream(stream), 4.0, seed=21 + i, mean_rate=rate,
                               steady=keys[stream])
        write_trace_per_round(trace, folder / "traces" / stream, 1.0, start=0.0)
    return {"folder": folder, "catalog": catalog, "queries": {s.name: q for s, q in specs},
            "charts": charts.load(folder / "charts")}


def _sources(three):
    from cqopt.spark.run import Source

    return {s: Source.files(s, three["folder"] / "traces" / s) for s in ("TCP", "UDP", "SF")}


def _same_rows(rounds, one: Path, other: Path) -> None:
    """Each of ``rounds``' results in run folder ``one`` holds the rows of ``other``'s, in
    any order."""
    for r in rounds:
        part = f"results/round-{r:06d}.parquet"
        x, y = (pd.read_parquet(folder / part) for folder in (one, other))
        x, y = (f.sort_values(list(f.columns), ignore_index=True) for f in (x, y))
        pd.testing.assert_frame_equal(x, y, check_dtype=False)


@pytest.mark.spark
@pytest.mark.slow
def test_a_workload_gives_each_query_the_rows_of_its_own_run(spark, three, tmp_path,
                                                             monkeypatch):
    """One streaming query for four: stopped after 2 rounds each and resumed, every
    query's rounds, plans and rows (and their Parquet schema) equal those of its run
    alone, row for row; each micro-batch's plans of every query ran as one Spark job."""
    from cqopt.spark.run.joint_job import JointJob
    from cqopt.spark.run import AdaptiveRun, RunSettings
    from cqopt.spark.run.workload import WorkloadRun

    joint: list[int] = []  # the plans of each joint job
    run = JointJob.run

    def counted(self, parts, limit):
        joint.append(len(parts))
        return run(self, parts, limit)
    monkeypatch.setattr(JointJob, "run", counted)

    queries = {n: (q, three["charts"][n]) for n, q in three["queries"].items()}
    lines: list[str] = []
    first = WorkloadRun(spark, queries, three["catalog"], _sources(three), tmp_path / "w",
                        RunSettings(max_rounds=2), progress=lines.append).run()
    assert all(len(r.rounds) == 2 for r in first.results.values())
    done = WorkloadRun(spark, queries, three["catalog"], _sources(three), tmp_path / "w",
                       RunSettings(), progress=lines.append).run()
    assert any(line.startswith("Q2: resuming after round 1") for line in lines)
    assert any("rows/s processed" in line for line in lines)  # Spark's progress, said
    assert done.failures == {}
    assert joint and max(joint) >= 3  # the queries' plans in one job, not one by one
    assert any("(one job for 4 plans of the workload)" in line for line in lines)
    for name, (query, chart) in queries.items():
        sources = {s: src for s, src in _sources(three).items() if s in query.stream_names}
        alone = AdaptiveRun(spark, name, query, chart, three["catalog"], sources,
                            tmp_path / f"alone-{name}", RunSettings(),
                            progress=lambda _: None).run()
        a, b = done.results[name].rounds, alone.rounds
        assert a["round"].tolist() == b["round"].tolist() and len(a) >= 2
        assert a["plan"].tolist() == b["plan"].tolist()
        assert a["rows_out"].tolist() == b["rows_out"].tolist()
        assert a["rows_in:" + query.stream_names[0]].tolist() == \
            b["rows_in:" + query.stream_names[0]].tolist()
        for r in a["round"]:
            part = f"results/round-{r:06d}.parquet"
            x = pd.read_parquet(tmp_path / "w" / name / part)
            y = pd.read_parquet(alone.out / part)
            assert pq.read_table(tmp_path / "w" / name / part).schema == \
                pq.read_table(alone.out / part).schema  # names, types and nullability
            assert list(x.columns) == list(y.columns)
            x, y = (f.sort_values(list(f.columns), ignore_index=True) for f in (x, y))
            pd.testing.assert_frame_equal(x, y, check_dtype=False)
    assert done.results["Q2"].rounds["rows_out"].sum() > 0  # the joins match something
    assert len(done.results["Q3"].rounds) == 2  # W = 2 s: its own rounds
    report = (tmp_path / "w" / "report.md").read_text()
    assert all(f"## {name}" in report for name in queries)
    # Q1, Q2 and Q5 read TCP's tuples of the same rounds: handed to Spark once, said.
    shared = json.loads((tmp_path / "w" / "report.json").read_text())["shared"]
    assert shared["joint_jobs"] >= 1 and shared["reads"] > shared["tables"]
    assert re.search(r"\b\d+ tables? of tuples for \d+ reads", report)


@pytest.mark.spark
def test_one_querys_failed_plan_is_counted_and_the_others_go_on(spark, three, tmp_path,
                                                                 monkeypatch):
    """Q1's plan fails in the first micro-batch that runs it: the joint job fails with it,
    so every plan runs again alone, and there Q1's fails: that failure is said and counted
    for Q1 alone, the other queries' rounds of that micro-batch are logged, and Q1 runs
    the same rounds with the next micro-batch (none is lost)."""
    from cqopt.spark.run.joint_job import JointJob
    from cqopt.spark.run import RunSettings
    from cqopt.spark.run.rounds import Grouped
    from cqopt.spark.run.workload import WorkloadRun

    write, run = Grouped.write, JointJob.run
    failed: list[int] = []

    def failing(self, index):
        if self.folder.parent.parent.name == "Q1" and not failed:
            failed.append(index)
            raise RuntimeError("a plan Spark cannot run")
        return write(self, index)

    def failing_joint(self, parts, limit):
        if not failed and any(part.name == "Q1" for part in parts):
            raise RuntimeError("a plan Spark cannot run")
        return run(self, parts, limit)
    monkeypatch.setattr(Grouped, "write", failing)
    monkeypatch.setattr(JointJob, "run", failing_joint)
    queries = {n: (q, three["charts"][n]) for n, q in three["queries"].items()
               if n in ("Q1", "Q3")}
    lines: list[str] = []
    done = WorkloadRun(spark, queries, three["catalog"], _sources(three), tmp_path / "w",
                       RunSettings(max_files_per_trigger=1), progress=lines.append).run()
    assert failed and done.failures == {"Q1": 1}
    assert any(line.startswith("Q1: failed on micro-batch") and "a plan Spark cannot run"
               in line for line in lines)
    assert any("the joint job of micro-batch" in line and "each alone" in line
               for line in lines)
    assert done.results["Q1"].rounds["round"].tolist() == [0, 1, 2, 3]  # tried again
    assert done.results["Q3"].rounds["round"].tolist() == [0, 1]
    assert "| Q1 |" in (tmp_path / "w" / "report.md").read_text()


@pytest.mark.spark
def test_a_plan_of_more_rows_than_the_driver_takes_runs_as_its_own_job(spark, three, tmp_path,
                                                                        monkeypatch):
    """With a limit of 100 rows a plan on the driver, Q2's join gives more in the first
    micro-batch: said once, and from then on Q2's rounds run as their own Spark job while
    Q1's stay in the joint job; Q2's rows are those of its run alone."""
    from cqopt.spark.run import AdaptiveRun, RunSettings, workload
    from cqopt.spark.run.workload import WorkloadRun

    monkeypatch.setattr(workload, "LOCAL_RESULT_ROWS", 100)
    monkeypatch.setattr(workload, "REPORT_LINE_S", 0.0)  # the reports' progress, said
    queries = {n: (three["queries"][n], three["charts"][n]) for n in ("Q1", "Q2")}
    lines: list[str] = []
    done = WorkloadRun(spark, queries, three["catalog"], _sources(three), tmp_path / "w",
                       RunSettings(max_files_per_trigger=1), progress=lines.append).run()
    said = [line for line in lines if "gave more than 100 rows" in line]
    assert len(said) == 1 and said[0].startswith("Q2: plan ")
    reports = [line for line in lines if "reports and timelines" in line]
    assert len(reports) == 1 and reports[0].startswith(
        "workload: reports and timelines written for 1 of 2 queries, ")
    assert done.failures == {}
    q2 = done.results["Q2"].rounds
    assert q2["rows_out"].min() > 100 and len(q2) == 4
    assert any(line.startswith("Q1: round") and "plans of the workload" not in line
               for line in lines)  # Q1 alone in the joint job: a job of one plan
    # A micro-batch of a joint job and Q2's own job is one micro-batch in the report.
    shared = json.loads((tmp_path / "w" / "report.json").read_text())["shared"]
    assert shared["jobs"] == shared["joint_jobs"] == len(q2)
    query = three["queries"]["Q2"]
    sources = {s: src for s, src in _sources(three).items() if s in query.stream_names}
    alone = AdaptiveRun(spark, "Q2", query, three["charts"]["Q2"], three["catalog"], sources,
                        tmp_path / "alone", RunSettings(), progress=lambda _: None).run()
    assert q2["rows_out"].tolist() == alone.rounds["rows_out"].tolist()
    _same_rows(q2["round"], tmp_path / "w" / "Q2", alone.out)


@pytest.mark.spark
def test_plans_run_side_by_side_go_to_their_querys_fair_pool(spark):
    """Each query's jobs run_all starts land in that query's scheduler pool, and cqopt's
    session shares the cores fairly among pools (not one FIFO queue, in which a query's
    large job holds every other query's behind it); the asking thread keeps its own."""
    from cqopt.spark.run.concurrent import POOL, run_all

    context = spark.sparkContext
    assert context.getConf().get("spark.scheduler.mode") == "FAIR"
    assert str(context._jsc.sc().getSchedulingMode()) == "FAIR"
    seen = {}

    def job(name: str) -> None:
        seen[name] = context.getLocalProperty(POOL)
        spark.range(100).count()
    names = ["pool-test-a", "pool-test-b", "pool-test-c"]
    assert run_all([lambda n=n: job(n) for n in names], pools=names) == [None] * 3
    assert seen == {n: n for n in names}
    # Spark made each pool when a job was submitted to it.
    assert all(context._jsc.sc().getPoolForName(n).isDefined() for n in names)
    assert context.getLocalProperty(POOL) is None
    assert run_all([lambda: job("unpooled"), lambda: None]) == [None, None]
    assert seen["unpooled"] is None


def _backlog_then_live(three, folder: Path, backlog: int = 4, seconds: int = 6) -> dict:
    """The three streams of ``three``'s rates over ``seconds`` s, written as one file of
    the first ``backlog`` seconds (a backlog: one micro-batch of several rounds), then one
    file a second (live rounds); the sources of them."""
    import os

    from cqopt.spark.run import Source

    keys = {"TCP": {"src_host": 40}, "UDP": {"dest_host": 40}, "SF": {"dest_host": 40}}
    for i, (stream, rate) in enumerate((("TCP", 200.0), ("UDP", 60.0), ("SF", 80.0))):
        trace = generate_trace(three["catalog"].stream(stream), float(seconds), seed=31 + i,
                               mean_rate=rate, steady=keys[stream])
        first = write_trace_per_round(trace[trace["ts"] < backlog], folder / "a" / stream,
                                      float(backlog), start=0.0, rounds=1)
        rest = write_trace_per_round(trace[trace["ts"] >= backlog], folder / "b" / stream,
                                     1.0, start=float(backlog), rounds=seconds - backlog)
        (folder / stream).mkdir()
        for n, path in enumerate(first + rest):  # Spark takes files in mtime order
            moved = path.rename(folder / stream / f"part-{n:05d}.parquet")
            os.utime(moved, (1e9 + n, 1e9 + n))
    return {s: Source.files(s, folder / s) for s in keys}


@pytest.mark.spark
def test_a_plan_that_gave_too_many_rows_in_a_backlog_returns_to_the_joint_job(
        spark, three, tmp_path, monkeypatch):
    """A first micro-batch of four rounds (a backlog), then one round a micro-batch, with
    the driver's limit at the most rows one round of Q2 gives: Q2's plan over the
    backlog's rounds gives more and runs as its own job (said), then comes back to the
    joint job when a micro-batch holds at most half those tuples (said), and its rows
    are those of its run alone."""
    from cqopt.spark.run import AdaptiveRun, RunSettings, workload
    from cqopt.spark.run.workload import WorkloadRun

    sources = _backlog_then_live(three, tmp_path / "traces")
    query = three["queries"]["Q2"]
    alone = AdaptiveRun(spark, "Q2", query, three["charts"]["Q2"], three["catalog"],
                        sources, tmp_path / "alone", RunSettings(),
                        progress=lambda _: None).run()
    limit = int(alone.rounds["rows_out"].max())
    monkeypatch.setattr(workload, "LOCAL_RESULT_ROWS", limit)
    queries = {n: (three["queries"][n], three["charts"][n]) for n in ("Q1", "Q2")}
    lines: list[str] = []
    done = WorkloadRun(spark, queries, three["catalog"], sources, tmp_path / "w",
                       RunSettings(max_files_per_trigger=1), progress=lines.append).run()
    left = [line for line in lines if f"gave more than {limit:,} rows" in line]
    back = [line for line in lines if "runs in the workload's joint job again" in line]
    assert len(left) == 1 and left[0].startswith("Q2: plan "), lines
    assert len(back) == 1 and back[0].startswith("Q2: plan "), lines
    assert lines.index(left[0]) < lines.index(back[0])
    assert done.failures == {}
    q2 = done.results["Q2"].rounds
    assert q2["rows_out"].tolist() == alone.rounds["rows_out"].tolist()
    assert (q2["round"] >= 4).sum() >= 1  # a live round ran after the return
    _same_rows(q2["round"], tmp_path / "w" / "Q2", alone.out)


@pytest.mark.spark
def test_equal_queries_run_one_job_and_each_gets_its_rows(spark, three, tmp_path,
                                                          monkeypatch):
    """Q1 and a copy of it under another name (and Q5 beside them): in the joint job the
    copy's part is Q1's (computed once), each query's rows are those of Q1's run alone,
    and the report counts the shared results. The first joint job fails, so its plans run
    alone: Q1's job gives the copy its rows too, and if Q1's job fails, the copy fails
    with it: both are counted, and both run the rounds again."""
    from cqopt.spark.run.joint_job import JointJob
    from cqopt.spark.run import AdaptiveRun, RunSettings
    from cqopt.spark.run.rounds import Grouped
    from cqopt.spark.run.workload import WorkloadRun

    written: list[str] = []  # whose plan each job ran
    write, run = Grouped.write, JointJob.run
    failed: list[str] = []
    same: list[set] = []  # each joint job's pairs (part, the part whose rows it took)

    def joint(self, parts, limit):
        if not same:
            same.append(set())
            raise RuntimeError("a joint job Spark cannot run")
        result = run(self, parts, limit)
        same.append({(parts[i].name, parts[j].name) for i, j in result.same.items()})
        return result
    monkeypatch.setattr(JointJob, "run", joint)

    def counted(self, index):
        owner = self.folder.parent.parent.name
        if not failed:
            failed.append(owner)
            raise RuntimeError("a plan Spark cannot run")
        written.append(owner)
        return write(self, index)
    monkeypatch.setattr(Grouped, "write", counted)
    q1, q5 = three["queries"]["Q1"], three["queries"]["Q5"]
    queries = {"Q1": (q1, three["charts"]["Q1"]), "Q1copy": (q1, three["charts"]["Q1"]),
               "Q5": (q5, three["charts"]["Q5"])}
    lines: list[str] = []
    done = WorkloadRun(spark, queries, three["catalog"], _sources(three), tmp_path / "w",
                       RunSettings(max_files_per_trigger=1), progress=lines.append).run()
    # Run alone, two jobs for three queries: the copy's rows came from Q1's job.
    assert len(written) + len(failed) == 2 and "Q1copy" not in written + failed
    assert len(same) >= 3 and all(pairs == {("Q1copy", "Q1")} for pairs in same[1:])
    first = failed[0]
    assert done.failures.get(first) == 1
    if first == "Q1":  # the copy's result was that failed job's: it failed too
        assert done.failures.get("Q1copy") == 1
    sources = {s: src for s, src in _sources(three).items() if s in q1.stream_names}
    alone = AdaptiveRun(spark, "Q1", q1, three["charts"]["Q1"], three["catalog"], sources,
                        tmp_path / "alone", RunSettings(), progress=lambda _: None).run()
    for name in ("Q1", "Q1copy"):
        a = done.results[name].rounds
        assert a["round"].tolist() == alone.rounds["round"].tolist() == [0, 1, 2, 3]
        assert a["rows_out"].tolist() == alone.rounds["rows_out"].tolist()
        _same_rows(a["round"], tmp_path / "w" / name, alone.out)
    shared = json.loads((tmp_path / "w" / "report.json").read_text())["shared"]
    assert shared["shared_results"] >= 3  # at least one a micro-batch that ran
    assert "whole result from an equal query's plan" in (tmp_path / "w" /
                                                         "report.md").read_text()


@pytest.mark.spark
def test_a_workload_negotiates_one_level_per_micro_batch_and_shrinks_windows_to_its_budget(
        spark, three, tmp_path, monkeypatch):
    """Q1 (W = 1 s) and Q3 (W = 2 s), two rounds each, under --deadline --negotiate and a
    --memory-budget. Without the job's fixed cost, the deadline is 0.3 of the queries'
    predicted seconds at their first rounds' statistics: every micro-batch's rounds share
    one level, logged, below 1 where both queries have rounds due. The budget is 0.6 of
    their plans' memory there: a micro-batch over it shrinks every window, its memory
    within the budget, one under it keeps them whole. Spark is handed only the tuples of a
    window's last part, at the negotiated share, sampled on the driver."""
    import dataclasses

    import numpy as np

    from cqopt.costmodel import make_model
    from cqopt.costmodel.validation import window_statistics
    from cqopt.replay.overload import chosen_memory
    from cqopt.spark.run import RunSettings, read_round_log
    from cqopt.spark.run.staging import Staging
    from cqopt.spark.run.workload import WorkloadRun

    catalog = dataclasses.replace(three["catalog"], engine=dataclasses.replace(
        three["catalog"].engine, job=0.0))
    engine = make_model("engine", catalog)
    seconds = memory = 0.0
    for name, stream, parts in (("Q1", "TCP", 1), ("Q3", "UDP", 2)):  # round 0's tuples
        query, chart = three["queries"][name], three["charts"][name]
        window = pd.concat([pd.read_parquet(three["folder"] / "traces" / stream
                                            / f"part-{i:05d}.parquet") for i in range(parts)])
        stats = {k: np.array([v]) for k, v in window_statistics(
            query, {stream: window}, query.round_seconds()).items()}
        seconds += float(engine.seconds(chart.plans[0], stats)[0])
        memory += min(float(chosen_memory(chart, catalog, stats, np.array([i]))[0])
                      for i in range(len(chart.plans)))
    handed: dict[tuple[str, int], object] = {}
    made = Staging.frames_from

    def frames_from(self, rows):
        for r in set(rows["_round"].to_pylist()):
            handed[self.ctx.name, r] = rows
        return made(self, rows)
    monkeypatch.setattr(Staging, "frames_from", frames_from)
    queries = {n: (three["queries"][n], three["charts"][n]) for n in ("Q1", "Q3")}
    budget = 0.6 * memory
    settings = RunSettings(deadline=0.3 * seconds, negotiate=True, memory_budget=budget,
                           window_min=0.1, max_rounds=2, start=0.0)
    WorkloadRun(spark, queries, catalog, {s: src for s, src in _sources(three).items()
                                          if s in ("TCP", "UDP")},
                tmp_path / "w", settings, progress=lambda _: None).run()
    records = {n: read_round_log(tmp_path / "w" / n) for n in queries}
    assert len(records["Q1"]) == len(records["Q3"]) == 2
    by_batch: dict[object, list[dict]] = {}  # a micro-batch's rounds, of every query
    for name, recs in records.items():
        for rec in recs:
            by_batch.setdefault(rec["batch"], []).append({**rec, "query": name})
            d, w = rec["deadline"], rec["window"]
            assert 0.0 < d["level"] == d["kept"] <= 1.0 and d["shed_on"] == "driver"
            if w["memory_before"] > budget:  # over: PIPES' windows, within the budget
                assert w["fraction"] < 1.0 and w["met"] and w["memory_after"] <= budget
            else:  # under: the whole window
                assert w["fraction"] == 1.0
                assert w["window_s"] == pytest.approx(rec["end"] - rec["start"])
            rows = handed[name, rec["round"]]  # the round's tuples Spark was handed
            mine = rows.filter(pc.equal(rows["_round"], rec["round"]))
            assert mine.num_rows == d["tuples_kept"]
            assert (mine.num_rows < sum(rec["rows_in"].values())) is (d["level"] < 1.0)
            assert min(mine["ts"].to_pylist(), default=rec["end"]) >= \
                rec["end"] - w["window_s"] - 1e-9
    for recs in by_batch.values():  # one level, one window fraction per micro-batch
        levels = {r["deadline"]["level"] for r in recs}
        assert len(levels) == 1
        if len({r["query"] for r in recs}) == 2:  # both queries' rounds overrun at full QoS
            assert levels.pop() < 1.0
        assert len({r["window"]["fraction"] for r in recs}) == 1
        assert {r["deadline"]["negotiated"] for r in recs} == {len(recs)}
    for name, recs in records.items():
        summary = json.loads((tmp_path / "w" / name / "report.json").read_text())
        assert summary["deadline"]["negotiation"]["mean_level"] == pytest.approx(
            np.mean([r["deadline"]["level"] for r in recs]))
        assert summary["memory"]["adapted_rounds"] == sum(r["window"]["fraction"] < 1
                                                          for r in recs)
    shrunk = [r["window"]["fraction"] < 1 for recs in records.values() for r in recs]
    assert any(shrunk), (budget, [r["window"] for r in records["Q1"]])
    assert "negotiated QoS level" in (tmp_path / "w" / "report.md").read_text()


class _LineServer:
    """A loopback TCP server that sends ``lines`` to the first client and holds the
    connection open until stopped (as a socket source's feed does)."""

    def __init__(self, lines: list[str]):
        self.lines, self.stop = lines, threading.Event()
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        self.server.settimeout(30)
        try:
            conn, _ = self.server.accept()
        except OSError:
            return
        with conn:
            conn.sendall("".join(line + "\n" for line in self.lines).encode())
            self.stop.wait(60)

    def close(self) -> None:
        self.stop.set()
        self.server.close()
        self.thread.join(5)


@pytest.mark.spark
def test_a_socket_source_feeds_a_run_and_a_bad_option_is_one_line(spark, three, tmp_path):
    """Spark's socket source, its lines the stream's columns as CSV (time in seconds)."""
    from cqopt.spark.run import AdaptiveRun, RunSettings, Source, StreamingRunError

    query, chart = three["queries"]["Q1"], three["charts"]["Q1"]
    # Rounds 0-2 of 1 s: 3, 4 and 2 tuples, those with dest_host 2 are Q1's rows.
    rows = [(0.1, 2), (0.4, 5), (0.9, 2), (1.1, 2), (1.2, 2), (1.5, 7), (1.9, 1),
            (2.2, 2), (2.5, 3)]
    server = _LineServer([f"{ts},1,{dest},10,20,300" for ts, dest in rows])
    try:
        source = Source.parse("TCP", f"socket:host=127.0.0.1,port={server.port}")
        result = AdaptiveRun(spark, "Q1", query, chart, three["catalog"], {"TCP": source},
                             tmp_path / "run", RunSettings(trigger="0.5", max_rounds=2),
                             progress=lambda _: None).run()
    finally:
        server.close()
    assert result.rounds["rows_in:TCP"].tolist() == [3, 4]
    assert result.rounds["rows_out"].tolist() == [2, 2]
    with pytest.raises(StreamingRunError, match="socket source needs the option port"):
        Source.parse("TCP", "socket:host=127.0.0.1")  # no port: said before Spark starts
    with socket.socket() as closed:  # a port nothing listens on: Spark's word, one line
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    refused = Source.parse("TCP", f"socket:host=127.0.0.1,port={port}")
    with pytest.raises(StreamingRunError) as err:
        AdaptiveRun(spark, "Q1", query, chart, three["catalog"], {"TCP": refused},
                    tmp_path / "refused", RunSettings(trigger="0.5"),
                    progress=lambda _: None).run()
    assert "\n" not in str(err.value) and "refused" in str(err.value).lower()


# -- bad input: one line before Spark starts ----------------------------------------
def _args(three, tmp_path, *extra, workload=None):
    traces = three["folder"] / "traces"
    return ["run", "--catalog", str(Path(__file__).resolve().parent.parent / "examples"
                                    / "dec-pkt.toml"),
            "--workload", str(workload or three["folder"] / "workload.toml"),
            "--charts", str(three["folder"] / "charts"), "--out", str(tmp_path / "run"),
            "--quiet", "--source", f"TCP={traces / 'TCP'}", *extra]


def _error(argv, capsys) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("cqopt: error: ") and "\n" not in err and "Traceback" not in err
    return err


@pytest.mark.parametrize("extra, edit, fragment", [
    (["--query", "Q1", "--query", "Q1"], None,
     "queries Q1 and Q1 would write one output folder (is named twice)"),
    (["--query", "Q1", "--query", "Q3"], None,
     "no --source for stream UDP, which query Q3 reads"),
    ([], None, "no --source for stream UDP, which query Q2 reads"),
    (["--query", "Q1", "--query", "Q3"], ("UDP.bytes > 500", "UDP.bytes > 501"),
     "its query Q3 is not the one in"),
    (["--query", "Q1", "--query", "Q4"], ('name = "Q3"', 'name = "Q4"'),
     "has no chart for query Q4"),
    (["--query", "Q1", "--query", "Q3", "--source", "UDP=socket:host=x"], None,
     "Spark's socket source needs the option port"),
    (["--query", "Q1", "--query", "Q3", "--source", "UDP=socket:host=x,port=99x"], None,
     "option port=99x must be a whole number"),
    (["--query", "Q1", "--query", "Q3", "--source", "UDP=socket:host=x,port=1",
      "--conf", "sql.shuffle.partitions=2"], None,
     "--conf sql.shuffle.partitions=2: Spark reads only keys that start with spark."),
])
def test_bad_workload_input_is_one_line_before_spark(three, tmp_path, capsys, monkeypatch,
                                                     extra, edit, fragment):
    import cqopt.spark.session as session

    def no_spark(*args, **kwargs):
        raise AssertionError("Spark was started")

    monkeypatch.setattr(session, "spark_session", no_spark)
    workload = None
    if edit is not None:
        workload = tmp_path / "workload.toml"
        workload.write_text((three["folder"] / "workload.toml").read_text().replace(*edit))
    err = _error(_args(three, tmp_path, *extra, workload=workload), capsys)
    assert fragment in err
