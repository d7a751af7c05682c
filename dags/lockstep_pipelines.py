"""Lockstep pipelines: one DAG per spec in include/pipelines/ (or $LOCKSTEP_PIPELINES_DIR).

Each DAG run is one checkpoint: plan -> run (Spark) -> commit, exactly once into
Kafka. See each DAG's docs for its pipeline; the factory lives in
plugins/lockstep_airflow/dag_factory.py. An invalid spec fails this file's import
with every problem listed as "file: field: reason".
"""
from lockstep_airflow.dag_factory import pipeline_dags

globals().update(pipeline_dags())
