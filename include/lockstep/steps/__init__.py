"""The steps of a checkpoint as orchestration: recover, plan, run, commit, and the CLI's whole cycle.
They call the rules for every decision and the I/O packages for every effect; ``client_factory`` builds
those clients, and ``pipeline`` holds what more than one step does.

Its public face is ``coordinator`` (every step's entry point, for the DAG's tasks, the CLI, ``ops`` and
the tools), ``client_factory`` (the clients of a spec's connections) and ``code_version`` (which code a claim
says wrote a checkpoint); the step modules are its own."""

__all__ = [
    "client_factory", "code_version", "coordinator",
]
