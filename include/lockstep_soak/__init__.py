"""``lockstep soak``: a pipeline run for many checkpoint cycles while a fault driver kills, restarts
and slows its parts at seeded random moments, then an auditor independent of the writer counts lost
and duplicated records. A tool, not the engine: nothing in ``lockstep`` imports it."""
