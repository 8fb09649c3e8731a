"""``cqopt run``: queries adaptively on Spark Structured Streaming, in rooms of one concern.

- :mod:`~cqopt.spark.run.settings`: the run's settings, judged once;
- :mod:`~cqopt.spark.run.sources`: each stream's input, checked and read;
- :mod:`~cqopt.spark.run.state`: the run folder's ``state.json`` (resuming);
- :mod:`~cqopt.spark.run.staging`: micro-batches, and tuples of open rounds staged;
- :mod:`~cqopt.spark.run.overload`: the overload bounds across queries (a memory
  budget, a negotiated deadline), and shedding on the driver;
- :mod:`~cqopt.spark.run.rounds`: statistics, choice, shedding, the plan's job;
- :mod:`~cqopt.spark.run.sink`: results and JSON files, through :mod:`cqopt.output`;
- :mod:`~cqopt.spark.run.roundlog` and :mod:`~cqopt.spark.run.report`: the round
  log and the report;
- :mod:`~cqopt.spark.run.microbatch`: each micro-batch's progress as Spark reports it;
- :mod:`~cqopt.spark.run.loop`: :class:`AdaptiveRun`, the loop that ties them;
- :mod:`~cqopt.spark.run.workload`: :class:`WorkloadRun`, several queries in one
  streaming query, each with the rooms of a run of its own;
- :mod:`~cqopt.spark.run.concurrent` and :mod:`~cqopt.spark.run.joint_job`: a
  micro-batch's plans as jobs side by side, or as one Spark SQL query.

:func:`cqopt.api.run` is the whole pipeline, from files to a report;
:func:`cqopt.api.run_workload` the same for a workload's queries together.
"""

from cqopt.spark.run.loop import AdaptiveRun
from cqopt.spark.run.report import RunResult
from cqopt.spark.run.roundlog import read_round_log
from cqopt.spark.run.settings import RunSettings, StreamingRunError, Tolerance
from cqopt.spark.run.sources import Source

__all__ = ["AdaptiveRun", "RunResult", "RunSettings", "Source", "StreamingRunError",
           "Tolerance", "read_round_log"]
