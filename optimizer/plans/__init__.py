"""Physical plans: operator nodes, ``Plan``, the builder, the JSON codec and the SQL writer."""
