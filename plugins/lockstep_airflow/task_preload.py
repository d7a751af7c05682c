"""The modules a Lockstep task imports, imported once by the process Airflow forks its task workers from.

Airflow 3 forks a process per task from a LocalExecutor worker; modules that only a DAG file or an operator
imports are never in the worker, so every task imported them again: Lockstep's steps, the Spark Connect client
(gRPC, pandas, pyarrow), boto3 and the Kafka clients. Sampled on a lag-triggered pipeline at 20,000 records/s,
imports were two thirds of a checkpoint task's CPU, about 0.6 s a task (docs/operations.md, "Task start").
Naming this module in ``[scheduler] mp_forkserver_preload``, with ``[scheduler] mp_start_method = forkserver``,
has Airflow's forkserver import it before it forks the workers, so each task inherits it, copy-on-write.

Imports, and one thing more: an S3 client is built and dropped (`lockstep.store.s3.warm_models`), which fills the caches of
boto3's default session with the S3 models botocore reads from its JSON files; a task's own client then reuses them
(about 0.1 s of a task's CPU, sampled). No channel, thread or connection is made here, so nothing is shared
across the fork (gRPC supports a fork before any channel exists; a botocore client connects on its first call).
Nothing else imports this module: a task's log says whether its worker had it (`lockstep_airflow.operators.preload_note`).
``lockstep dev up`` sets both options; docs/operations.md says how to set them elsewhere. A module that fails to
import is skipped, and a task then imports it itself, as before.
"""
from __future__ import annotations

__all__ = ["MODULES"]

import importlib

#: What a checkpoint task imports beyond Airflow itself, in the order a task meets them: the DAG file's, the
#: operators' steps, the Spark Connect client, the clients of S3 and Kafka, the plugin Airflow loads in a task.
MODULES = (
    "lockstep_airflow.dag_factory", "lockstep_airflow.operators", "lockstep_airflow.params",
    "lockstep.steps.coordinator", "lockstep.steps.plan", "lockstep.steps.run", "lockstep.steps.commit",
    "lockstep.spark.job", "lockstep.spark.connect", "lockstep.spark.keyed_state", "lockstep.ops.lag",
    "lockstep.ops.metrics", "lockstep.kafka.committer",
    "pyspark.sql.connect.session", "pyspark.sql.connect.client", "pyspark.sql.connect.functions",
    "pandas", "pyarrow", "boto3", "botocore.client", "kafka", "confluent_kafka", "confluent_kafka.admin",
    "lockstep_plugin", "airflow.sdk.execution_time.task_runner", "airflow.sdk.execution_time.supervisor",
)

for _name in MODULES:
    try:
        importlib.import_module(_name)
    except Exception:  # noqa: BLE001 - a module that cannot be preloaded is imported by the task itself
        continue


try:
    from lockstep.store.s3 import warm_models

    warm_models()
except Exception:  # noqa: BLE001 - a task builds its own client as before
    pass
