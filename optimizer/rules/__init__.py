"""The enumeration of candidate plans: the OM paper's heuristics as rules, and their driver."""
