"""The enumeration of candidate plans: the OM paper's heuristics as rules, and their driver.

**The rules are shape decisions, not tree rewrites.** Unlike sqlglot's optimizer rules, a
rule here does not rewrite a plan's tree. Each decides fields of the plan's
:class:`~cqopt.optimizer.plans.builder.PlanShape` and nothing else:

- :mod:`~cqopt.optimizer.rules.group_selections` sets ``grouped`` (one selection
  operator per stream, or one per conjunct);
- :mod:`~cqopt.optimizer.rules.aggregate_last` sets ``complete`` (the aggregate and
  the final projection on top);
- :mod:`~cqopt.optimizer.rules.pushdown` sets ``orders`` (each stream's σ/π order
  above its source);
- :mod:`~cqopt.optimizer.rules.join_orders` sets ``join_order``;
- :mod:`~cqopt.optimizer.rules.join_strategies` sets ``strategies`` (each join's hint).

A rule reads a plan's decisions with :func:`~cqopt.optimizer.plans.builder.shape_of`
and hands the changed shape to ``context.builder.build_shape``; only
:mod:`cqopt.optimizer.plans.builder` places the operators. The reason is that there is
one placement, worked out once. Where an operator goes, what it emits, its width and
its selectivity statistics are decided in one place. So every rule means the same thing
by a decision, and a plan is the same whichever rules built it and in whatever order.
The builder also computes what the plans of one query share (each stream's operator
chain, each join step with its predicates and statistics) once, not once per rule or
per plan.
"""
