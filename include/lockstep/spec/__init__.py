"""Pipeline specs: one YAML file per pipeline, validated all at once.

A spec decides where data goes and which transactional ids Lockstep may fence, so a typo must
never be silently ignored: unknown keys are errors, and every problem is reported together with
its file and field path (`SpecError`).

This package's ``__init__`` is its public surface: what the rest of Lockstep (and a user's code) imports
from ``lockstep.spec``. Each section of a spec has its own module beside it: ``checker`` (the generic
readers and how problems are collected), ``formats``, ``sources`` (source, sink, transform), ``tables``,
``state``, ``checkpoints`` (checkpoints, transactions, spark, producer, alerts), ``pipeline``
(`PipelineSpec`) and ``loading`` (reading spec files); ``shape`` declares the spec's shape once
(``lockstep spec schema`` renders it) and ``fields`` is how a field is declared.
"""

from __future__ import annotations

from lockstep.errors import SpecError
from lockstep.formats.names import FORMATS, REGISTRY_FORMATS
from lockstep.spec import shape
from lockstep.spec.checker import DURATION_RULE
from lockstep.spec.checkpoints import AlertsSpec, SparkSpec, TransactionSpec, TriggerSpec
from lockstep.spec.formats import BYTES, FormatSpec
from lockstep.spec.loading import cross_check, load_each, load_for_dag, load_spec, load_specs, parse_spec, spec_files
from lockstep.spec.pipeline_spec import PipelineSpec
from lockstep.spec.shape import (
    COMPATIBILITY_LEVELS,
    DEFAULT_KEY_GROUPS,
    DEFAULT_KEY_NAME,
    DEFAULT_OWNER,
    DEFAULT_REGISTRY_CONN_ID,
    DUPLICATE_ACTIONS,
    RESERVED_PRODUCER_KEYS,
    SCHEDULE_PRESETS,
    SPARK_MODES,
    STATE_FIELD_TYPES,
    WRITERS,
)
from lockstep.spec.sources import IcebergSinkSpec, SinkSpec, SourceSpec, TablePartition
from lockstep.spec.state import CompactionPolicy, DedupSpec, EventTime, StateSpec, WindowSpec
from lockstep.spec.tables import TableJoin, TableSpec

#: The names the rest of Lockstep and its users import from here: the spec's values, the loaders, the
#: shape's constants (declared in ``shape``, re-exported) and ``shape`` itself (for ``lockstep spec schema``).
__all__ = [
    "BYTES", "COMPATIBILITY_LEVELS", "DEFAULT_KEY_GROUPS", "DEFAULT_KEY_NAME", "DEFAULT_OWNER",
    "DEFAULT_REGISTRY_CONN_ID", "DUPLICATE_ACTIONS", "DURATION_RULE", "FORMATS", "REGISTRY_FORMATS",
    "RESERVED_PRODUCER_KEYS", "SCHEDULE_PRESETS", "SPARK_MODES", "STATE_FIELD_TYPES", "WRITERS",
    "AlertsSpec", "CompactionPolicy", "DedupSpec", "EventTime", "FormatSpec", "IcebergSinkSpec", "PipelineSpec", "SinkSpec",
    "SourceSpec", "SparkSpec", "SpecError", "StateSpec", "TableJoin", "TablePartition", "TableSpec", "TransactionSpec",
    "TriggerSpec",
    "WindowSpec", "cross_check", "load_each", "load_for_dag", "load_spec", "load_specs", "parse_spec", "shape",
    "spec_files",
]
