"""Physical plans: operator nodes, ``Plan``, the builder (with each stream's σ/π orders and
each join step's predicates, what it builds from), the JSON codec and the SQL writer."""
