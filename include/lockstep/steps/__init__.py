"""The steps of a checkpoint as orchestration: recover, plan, run, commit. They call the rules for
every decision and the I/O packages for every effect; ``client_factory`` builds those clients."""
