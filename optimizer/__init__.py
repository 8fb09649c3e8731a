"""The optimizer, in three rooms, each importing only the rooms before it.

- :mod:`cqopt.optimizer.query`: the query front end; CQL text parsed (the
  dialect on sqlglot), bound to the catalog, checked and classified into a
  logical :class:`~cqopt.optimizer.query.logical.ContinuousQuery`, with its
  grouped selections, join predicates (closed transitively) and the names of
  the statistics it depends on;
- :mod:`cqopt.optimizer.plans`: physical plans; the operator nodes, ``Plan``,
  the builder of one plan from its shape, the JSON codec chart sets store, and
  a plan as SQL;
- :mod:`cqopt.optimizer.rules`: the OM paper's heuristics as a list of rules
  (``HEURISTICS``), their driver ``enumerate_plans``, the contract checked
  after each rule, and the join-order search.
"""
