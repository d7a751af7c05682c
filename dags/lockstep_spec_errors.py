"""Lockstep pipeline specs that do not validate, shown in Airflow's UI as this DAG file's import error.

It declares no DAG. lockstep_pipelines.py leaves a spec that does not validate out and keeps every
other pipeline's DAG; this file names what is wrong with the ones left out (file: field: reason), and
imports cleanly when every spec validates.
"""
from lockstep_airflow.dag_factory import raise_spec_problems

raise_spec_problems()
