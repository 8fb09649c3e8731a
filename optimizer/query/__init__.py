"""The query front end: CQL text to a checked logical query (:mod:`.logical`)."""
