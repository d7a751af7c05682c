"""Look after the Iceberg tables of Lockstep pipelines (`sink.iceberg`): daily, or triggered with params.

Each checkpoint adds a data file per source partition it read, so a table fed every minute gathers thousands of
small files a day. This DAG runs `lockstep iceberg upkeep` for one pipeline's table or every one: the rows of
all but the newest `keep` completed checkpoints compacted into fewer files, snapshots older than
`expire_older_than` expired (never the snapshot of a checkpoint not completed yet), then the data files no
snapshot reads, older than `orphans_older_than`, removed (never in the folder of a checkpoint in flight).
The task log has each action's line, the pipeline's Checkpoints page its latest figures (docs/iceberg.md).
Paused at creation like any DAG: unpause it to have it run daily.
"""
from datetime import datetime

from airflow.sdk import DAG, Param

from lockstep.paths import pipelines_dir
from lockstep.spec import load_each
from lockstep_airflow.operators import EVERY_TABLE, LockstepIcebergUpkeepOperator

AGE = r"^[0-9]+(\.[0-9]+)?[smhd]?$"
names = sorted(spec.name for spec in load_each(pipelines_dir())[0] if spec.sink.iceberg is not None)

with DAG(
    dag_id="lockstep_iceberg_upkeep",
    schedule="@daily",
    start_date=datetime(2024, 1, 1),
    catchup=False,
    max_active_runs=1,
    doc_md=__doc__,
    tags=["lockstep", "iceberg"],
    params={
        "pipeline": Param(EVERY_TABLE, type="string", enum=[EVERY_TABLE, *names], title="Pipeline"),
        "keep": Param(10, type="integer", minimum=1, title="Checkpoints left as written",
                      description="The newest completed checkpoints whose files are not compacted."),
        "expire_older_than": Param("7d", type="string", pattern=AGE, title="Expire snapshots older than",
                                   description="Seconds, or with s, m, h or d; longer than a commit's retries."),
        "orphans_older_than": Param("3d", type="string", pattern=AGE, title="Remove orphan files older than",
                                    description="Seconds, or with s, m, h or d; longer than a run takes."),
        "dry_run": Param(False, type="boolean", title="Count the orphans, remove none"),
    },
):
    LockstepIcebergUpkeepOperator(task_id="upkeep", pipelines_dir=str(pipelines_dir()))
