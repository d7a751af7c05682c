"""Pure decisions over the values of ``model``: where to start, which ranges to read, what to commit
or abort, what recovery does, who owns a run, what a checkpoint was planned with. No I/O: a rule is
a function of its arguments, tested without services."""
