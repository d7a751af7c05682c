"""Lockstep inside Airflow: importable from the plugins folder by DAG files and by ``lockstep_plugin``."""
