"""Airflow's local settings for Lockstep: Airflow imports this module, from ``$AIRFLOW_HOME/config``, in each of
its processes as it starts.

In the dag-processor it preloads what parsing Lockstep's DAG files imports, so that each parse, a process the
dag-processor forks, inherits it (`lockstep_airflow.parse_preload`); in any other process it does nothing.
``lockstep dev up`` copies this file into its Airflow's home and docker-compose.yaml mounts this folder; with
local settings of your own, add its two lines to them (docs/operations.md, "The dag-processor's parses").
"""
from lockstep_airflow.parse_preload import preload_in_dag_processor

preload_in_dag_processor()

#: Names Airflow would take from this module as policies or settings: none.
__all__: list[str] = []
