"""Reading the base state a checkpoint starts from (`lockstep.rules.state_reads`): of each key group the
records touch, the rows of the touched keys (every row of a group read whole), decoded from the group's
chain (`lockstep.store.state_chain`) and handed to Spark, migrated when the state function's schema
changed (``state.function.migrate``). The chains stay at hand for a compaction
(`lockstep.spark.state_write`)."""
from __future__ import annotations

__all__ = ["SELECT_THREADS", "Loaded"]

import logging
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, cast

from lockstep.errors import CheckpointError
from lockstep.model.state_manifest import StateManifest
from lockstep.model.state_rows import EVENT, GROUP, KEY
from lockstep.rules.dedup import state_lifetime_ms
from lockstep.rules.state_base import schema_change
from lockstep.rules.state_reads import ReadPlan
from lockstep.rules.watermarks import EventClock
from lockstep.spec import PipelineSpec, StateSpec

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

    from lockstep.spark.target import JobSession
    from lockstep.store.state_files import StateFiles

log = logging.getLogger(__name__)


#: Threads that select the touched keys' rows of the groups a checkpoint read: one per core.
SELECT_THREADS = max(2, os.cpu_count() or 2)


@dataclass
class Loaded:
    """What a checkpoint read of its base state: the rows it works on, as a DataFrame, and per key
    group read, the decoded chain (for a compaction) and the rows taken from it (before the TTL)."""

    frame: DataFrame
    chains: dict[int, list[pa.Table]] = field(default_factory=dict)
    selected: dict[int, pa.Table] = field(default_factory=dict)


def _load(spark: JobSession, spec: PipelineSpec, cid: int, base: StateManifest | None, files: StateFiles,
          shape: DataFrame, good: DataFrame, plan: ReadPlan, records: pa.Table | None = None,
          seen: pa.Table | None = None) -> Loaded:
    """The base state's rows this checkpoint needs, as a DataFrame with ``shape``'s columns (an empty
    one without state): in full, every row; else, of each group the records touch, the rows of the
    keys they touch, and every row of a group with a due timer (`lockstep.rules.state_reads`).

    ``records``: the records, collected already (a dedup judged on the driver): the touched keys are
    theirs, and the rows stay on the driver (``frame`` is then empty).

    A column the state lacks is read as null (a nullable field added to the transform); a column the
    state has and the transform no longer gives, or one whose type changed, is refused by name."""
    assert spec.state is not None
    want = {f.name: f.dataType.simpleString() for f in shape.schema.fields}
    if base is None or not base.all_files:
        return Loaded(shape.limit(0))
    migrate = spec.state.function is not None and spec.state.function.migrate
    problems = schema_change(base.columns, want)
    if problems and not migrate:
        raise CheckpointError(cid, f"the state of checkpoint {base.written_by} cannot be read with the transform's "
                                   f"new columns: {'; '.join(problems)}. Keep the field in the transform (its type "
                                   "too), or give the pipeline a new name to start without state")
    touched: dict[int, pa.Array] = {}
    if plan.full:
        groups = sorted(base.files)
    else:
        touched = _touched_keys(good, records if records is not None else seen)
        groups = sorted((set(touched) | plan.whole) & set(base.files))
    loaded = Loaded(shape.limit(0))
    loaded.chains = files.chains(base, groups)
    loaded.selected = _selected(loaded.chains, plan, touched)
    if not loaded.selected or records is not None:
        return loaded
    loaded.frame = _frame(spark, spec, base, loaded.selected, want, problems)
    return loaded


def _touched_keys(good: DataFrame, records: pa.Table | None) -> dict[int, pa.Array]:
    """The keys the records touch, per key group: of the records collected when there are, else computed
    by Spark."""
    import pyarrow.compute as pc

    if records is not None:
        keys = records.select([KEY, GROUP]).group_by([KEY, GROUP]).aggregate([])
    else:
        keys = good.select(KEY, GROUP).distinct().toArrow()
    return {int(g): keys.filter(pc.equal(keys[GROUP], g))[KEY].combine_chunks()
            for g in pc.unique(keys[GROUP]).to_pylist()}


def _selected(chains: dict[int, list[pa.Table]], plan: ReadPlan, touched: dict[int, pa.Array]) -> dict[int, pa.Table]:
    """Of each group's decoded chain, the rows of its ``touched`` keys (every row of a group read whole),
    merged; a group left with none is left out."""
    from lockstep.store import state_chain

    def selected(group: int) -> pa.Table | None:
        chain = chains[group]
        if not plan.reads_whole(group):
            chain = [state_chain.select(t, touched[group]) for t in chain]
        return state_chain.merge(chain)

    found: dict[int, pa.Table] = {}
    # A group at a time on each core: pyarrow's compute releases the interpreter lock, and a restore's
    # selection probes every row it read (10M keys at 10M keys of dedup state).
    with ThreadPoolExecutor(min(SELECT_THREADS, len(chains)) or 1, thread_name_prefix="lockstep-state-select") \
            as pool:
        for group, merged in zip(chains, pool.map(selected, chains), strict=True):
            if merged is not None and merged.num_rows:
                found[group] = merged
    return found


def _frame(spark: JobSession, spec: PipelineSpec, base: StateManifest, selected: dict[int, pa.Table],
           want: dict[str, str], problems: list[str]) -> DataFrame:
    """The rows selected as one DataFrame of the columns the state wants now: migrated when its schema
    changed, a missing column as null, and each key's group anew when the state re-keys."""
    import pyarrow as pa
    from pyspark.sql import functions as F

    assert spec.state is not None
    # One chunk: a Connect session's createDataFrame was seen keeping only the first chunk of a table
    # concatenated from several files (pyspark 4.0.0), dropping every other key group's rows.
    table = pa.concat_tables(list(selected.values()), promote_options="default").combine_chunks()
    frame = cast("SparkSession", spark).createDataFrame(table)  # pyspark types both sessions alike
    if problems:
        frame = _migrated(spec, base, frame)
    else:
        frame = frame.select(*[(F.col(c) if c in frame.columns else F.lit(None)).cast(t).alias(c)
                               for c, t in want.items()])
    if base.key_groups != spec.state.key_groups:  # re-keying (in full): every key's group anew
        frame = frame.withColumn(GROUP, F.pmod(F.xxhash64(F.col(KEY)), F.lit(spec.state.key_groups)).cast("int"))
    return frame


def _migrated(spec: PipelineSpec, base: StateManifest, frame: DataFrame) -> DataFrame:
    """State of an earlier schema, through the spec's ``state.function.migrate``, row by row."""
    from lockstep.spark.state_worker import FunctionSettings, migrate_rows, schema_ddl, state_columns

    assert spec.state is not None and spec.state.function is not None
    f = spec.state.function
    log.warning("state of checkpoint %d has schema version %d and fields %s; migrating it to version %d with %s",
                base.written_by, base.schema_version, ", ".join(base.columns), f.version, f.migrate)
    settings = FunctionSettings(f.process, f.fields, None, (), f.migrate, base.schema_version)
    old = tuple(n for n in base.columns if n not in dict(state_columns(())))
    return frame.mapInPandas(migrate_rows(settings, old), schema_ddl(state_columns(f.fields)))  # type: ignore[arg-type]


def _held(state: StateSpec, clock: EventClock, loaded: Loaded, columns: tuple[str, ...]) -> pa.Table:
    """The rows loaded (``columns`` of them), less those the base's watermark had let go (read as absent)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    tables = [t.select([c for c in columns if c in t.column_names]) for t in loaded.selected.values()]
    if not tables:
        return pa.table({c: pa.array([], pa.string() if c == KEY else pa.int64()) for c in columns})
    held = pa.concat_tables(tables, promote_options="default")
    lifetime = state_lifetime_ms(state)
    if lifetime is not None and clock.before is not None:
        held = held.filter(pc.greater(pc.add(held[EVENT], lifetime), clock.before))
    return held
