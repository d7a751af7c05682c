"""Pure decisions over the values of ``model``: where to start, which ranges to read, what to commit
or abort, what recovery does, who owns a run, what a checkpoint was planned with, when to alert. No I/O:
a rule is a function of its arguments, tested without services.

Called by the steps, the Spark run, the store, ``ops``, the CLI and the Airflow plugin (the lag
trigger, run ownership, alerts). Each module's ``__all__`` names what others may import."""

__all__ = [
    "alert_policy", "change_plan", "commit_decision", "compaction", "dedup", "lag_trigger", "manifest_figures",
    "output_diff", "output_tasks", "pinned", "pipelining", "ranges", "recovery", "replay", "run_ownership",
    "start_offsets", "state_base", "state_diff", "state_reads", "watermarks", "window_drain", "window_partials",
]
