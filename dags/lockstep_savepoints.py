"""Take or delete a savepoint of a Lockstep pipeline from the Airflow UI.

Trigger with params: the pipeline, `create` or `delete`, the savepoint name and
optionally the completed checkpoint to copy (default: the latest). Restore from
a savepoint by triggering the pipeline's DAG with `restore_from` set to its name.
"""
from datetime import datetime

from airflow.sdk import DAG, Param

from lockstep.paths import pipelines_dir
from lockstep.spec import load_each
from lockstep_airflow.operators import LockstepSavepointOperator
from lockstep_airflow.params import RESTORE_PATTERN

names = sorted(spec.name for spec in load_each(pipelines_dir())[0]) or ["(no pipelines)"]

with DAG(
    dag_id="lockstep_savepoints",
    schedule=None,
    start_date=datetime(2024, 1, 1),
    catchup=False,
    doc_md=__doc__,
    tags=["lockstep", "savepoints"],
    params={
        "pipeline": Param(names[0], type="string", enum=names, title="Pipeline"),
        "action": Param("create", type="string", enum=["create", "delete"], title="Action"),
        "name": Param("manual", type="string", pattern=RESTORE_PATTERN.replace("checkpoint:[0-9]+|", ""),
                      title="Savepoint name", description="Letters, digits, '.', '_', '-'; up to 100 characters."),
        "checkpoint_id": Param(None, type=["null", "integer"], minimum=1, title="Checkpoint",
                               description="Completed checkpoint to copy (create only); empty = the latest."),
    },
):
    LockstepSavepointOperator(task_id="savepoint", pipelines_dir=str(pipelines_dir()))
