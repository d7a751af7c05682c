"""A validated pipeline spec: every section's value, and what is derived from them (DAG id, store location)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from lockstep.spec.checkpoints import AlertsSpec, CheckpointSpec, SparkSpec, StoreLocation, TransactionSpec
from lockstep.spec.shape import DEFAULT_OWNER
from lockstep.spec.sources import SinkSpec, SourceSpec
from lockstep.spec.state import StateSpec
from lockstep.spec.tables import TableSpec

__all__ = ["PipelineSpec", "dag_id_of"]


@dataclass(frozen=True)
class PipelineSpec:
    """A validated pipeline spec: every section's value, as `lockstep.spec.parse_spec` built it."""

    name: str
    description: str
    source: SourceSpec
    transform: str
    sink: SinkSpec
    checkpoints: CheckpointSpec
    transactions: TransactionSpec
    spark: SparkSpec
    #: producer settings for the writers' clients, as the YAML gives them
    producer: Mapping[str, object]
    path: str
    #: The keyed state of a stateful pipeline (windows or dedup); None for a stateless one.
    state: StateSpec | None = None
    #: Set on the derived pipeline that replays dead letters (``lockstep.spark.dead_letter_replay.replay_spec``): the
    #: name of the pipeline whose dead letters it replays. Never read from YAML.
    replay_of: str | None = None
    #: Who runs the pipeline: its DAG's owner in Airflow (the DAG list filters by it).
    owner: str = DEFAULT_OWNER
    #: Tags added to its DAG's own (``lockstep``, source, sink).
    tags: tuple[str, ...] = ()
    #: Whom a failed checkpoint notifies; None: no one.
    alerts: AlertsSpec | None = None
    #: An SQL pipeline's query over the view ``input`` (``transform: {sql: ...}`` or ``{sql_file: ...}``), as
    #: read when the spec is loaded; None for a Python transform. ``transform`` then only names it for people
    #: (``SQL (query.sql)``), and `lockstep.transform.load_transform` runs the query instead of importing.
    transform_sql: str | None = None
    #: Where the query came from: its file (as read), or ``inline``; for messages.
    transform_sql_from: str | None = None
    #: Tables by name (``tables:``), in the spec's order; empty without.
    tables: tuple[TableSpec, ...] = ()

    @property
    def is_sql(self) -> bool:
        """Whether the transform is an SQL query (`transform_sql`) rather than a Python function."""
        return self.transform_sql is not None

    @property
    def dag_id(self) -> str:
        """Airflow DAG ids in this project all start with `lockstep_`; '-' is avoided for readability."""
        return dag_id_of(self.name)

    @property
    def checkpoint_location(self) -> StoreLocation:
        """Each pipeline owns `<prefix>/<name>` in the store, so pipelines may share one bucket."""
        prefix = f"{self.checkpoints.prefix}/{self.name}" if self.checkpoints.prefix else self.name
        return StoreLocation(self.checkpoints.bucket, prefix)

    @property
    def transform_target(self) -> tuple[str, str]:
        """(module, function) of the transform, whichever of the two accepted syntaxes was used. An SQL
        pipeline (`transform_sql`) has none: check `is_sql` first."""
        module, _, function = self.transform.partition(":")
        return module, function


def dag_id_of(name: str) -> str:
    """The Airflow DAG id of the pipeline named ``name`` (`PipelineSpec.dag_id`)."""
    return "lockstep_" + name.replace("-", "_")
