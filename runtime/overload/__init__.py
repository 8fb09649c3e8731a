"""Keeping a stream system's promises under overload: the seeds' algorithms as pure functions.

One module per algorithm, each free of Spark and pandas so the run loop and the
replay can both call it:

- :mod:`~cqopt.runtime.overload.shedding`: Babcock, Datar and Motwani's load
  shedding for sliding-window SUM/COUNT queries (seed 004): error constants,
  effective sampling rates, Algorithm 1's placement over shared segments, the
  load equation solved for λ = 1/ε_max, answers scaled by 1/P.
- :mod:`~cqopt.runtime.overload.window_adaptation`: PIPES' adaptive resource
  manager (seed 002, §4): one common fraction of every query's window and
  granularity QoS range within cost and memory bounds, and the delays with
  which a change takes effect.
- :mod:`~cqopt.runtime.overload.qos_negotiation`: RTStream's deadline-driven
  QoS management (seed 000, §4.3–4.4): input/quality tables, inter-query
  negotiation of a common QoS level with pseudo-deadlines, intra-query
  refinement by early drops (a join's inputs in the table's ratio).
- :mod:`~cqopt.runtime.overload.simulate`: the same decisions replayed over a
  trace's per-round statistics (predicted seconds, deadline, share kept,
  tuples dropped, the promised (ε, δ) bound), for the fidelity replay.

>>> MODULES
('shedding', 'window_adaptation', 'qos_negotiation', 'simulate')
"""

MODULES = ("shedding", "window_adaptation", "qos_negotiation", "simulate")
