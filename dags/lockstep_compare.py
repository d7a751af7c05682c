"""Compare a new version of a Lockstep pipeline's spec with what the pipeline wrote, from the Airflow UI.

Trigger with params: the pipeline, the new spec's file (absolute, or relative to the pipelines folder; keep
candidates outside it), how many of the newest completed checkpoints to compute again. Each is computed again
through the new spec from its own claim (ranges, state, clock, schema and table pins) and compared record by
record with what it committed; nothing is written to the sinks. The task log shows the report
(`lockstep replay --compare`), the Checkpoints page its summary. With `fail_on_change` the task fails when the
output or the state changes.
"""
from datetime import datetime

from airflow.sdk import DAG, Param

from lockstep.paths import pipelines_dir
from lockstep.spec import load_each
from lockstep_airflow.operators import LockstepCompareOperator

names = sorted(spec.name for spec in load_each(pipelines_dir())[0]) or ["(no pipelines)"]

with DAG(
    dag_id="lockstep_compare",
    schedule=None,
    start_date=datetime(2024, 1, 1),
    catchup=False,
    doc_md=__doc__,
    tags=["lockstep", "compare"],
    params={
        "pipeline": Param(names[0], type="string", enum=names, title="Pipeline"),
        "spec": Param("", type="string", minLength=1, title="New spec",
                      description="The new version's spec file on the workers: absolute, or relative to the "
                                  "pipelines folder."),
        "last": Param(10, type=["null", "integer"], minimum=1, title="Checkpoints",
                      description="How many of the newest completed checkpoints to compare; empty = every retained one."),
        "examples": Param(5, type="integer", minimum=0, maximum=100, title="Examples shown"),
        "fail_on_change": Param(False, type="boolean", title="Fail when the output or the state changes"),
    },
):
    LockstepCompareOperator(task_id="compare", pipelines_dir=str(pipelines_dir()))
