"""The Iceberg sink's one adapter to pyiceberg: the table made or evolved, a checkpoint's files written and staged
on its branch (the run, Flink's writer and committable), the table asked whether a checkpoint's snapshot is
published, staged or neither, the staged snapshot published on main or dropped (the commit, Flink's committer).

Publishing adds the staged snapshot's files (all, or all but a repair's lost share) in one new snapshot on main
whose summary names the pipeline and the checkpoint: main then holds every checkpoint's rows once, whatever
order pipelined checkpoints are staged in, and a publish again finds its own snapshot in main's history
(`published`) instead of adding the rows twice. Iceberg's commits are optimistic: a publish that meets another
writer's commit is tried again on the new main, as Iceberg's own writers do.

Every failure is a Lockstep error that says whether a retry may pass: the catalog unreachable or a commit that
kept conflicting is transient; a table or a column the checkpoint cannot write is terminal.
"""
from __future__ import annotations

__all__ = [
    "FileTarget", "IcebergTable", "Observed", "Orphan", "RowsOfSource", "SourceFiles", "WrittenFile", "plain_type",
]

import uuid
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from lockstep.connections import iceberg_catalog, redact
from lockstep.errors import TerminalError, TransientError
from lockstep.iceberg.staged_table import (
    BRANCH_PREFIX,
    PROVENANCE_COLUMNS,
    SUMMARY_CHECKPOINT,
    SUMMARY_PIPELINE,
    StagedTable,
    TableFile,
    branch_name,
)

if TYPE_CHECKING:
    from collections import Counter

    import pyarrow as pa
    from pyiceberg.catalog import Catalog
    from pyiceberg.manifest import DataFile
    from pyiceberg.table import Table

    from lockstep.spec import TablePartition

T = TypeVar("T")
#: How many times a publish is tried when other writers' commits keep changing main under it.
PUBLISH_ATTEMPTS = 5
#: About how many bytes (as Arrow holds them) of a source's rows a data file's row group gathers.
ROW_GROUP_BYTES = 64 * 1024 * 1024
#: The summary property of the empty snapshot a table created by Lockstep starts with (branches need one).
SUMMARY_CREATED = "lockstep.created-by"


@dataclass(frozen=True)
class RowsOfSource:
    """The rows of one source partition (``topic:partition``) for the table."""

    source: str
    rows: pa.Table


@dataclass(frozen=True)
class Orphan:
    """A file under the table's data folder that no snapshot reads."""

    path: str
    size: int


@dataclass(frozen=True)
class Observed:
    """What the table says of a checkpoint: the snapshot on main that published it (None: not published), and
    whether its staged snapshot is still on its branch."""

    published: int | None
    staged: bool


@dataclass(frozen=True)
class FileTarget:
    """Where a checkpoint's data files go, handed to the Spark tasks that write them: the table's name, a folder
    of this attempt's own under the table's location, the rows' Arrow schema and the table's file IO
    properties (they may hold the object store's credentials: never printed)."""

    table: str
    folder: str
    schema: pa.Schema
    io_properties: Mapping[str, str] = field(repr=False)
    #: The Parquet writer's options from the table's write properties (`parquet_options`).
    parquet: Mapping[str, Any] = field(default_factory=dict)
    #: The table's schema, partition spec and properties as the files are written for them (pyiceberg's):
    #: each file's partition and column statistics are recorded as Iceberg's own writers record them.
    iceberg_schema: Any = field(default=None, repr=False)
    spec: Any = field(default=None, repr=False)
    properties: Mapping[str, str] = field(default_factory=dict, repr=False)


@dataclass(frozen=True)
class WrittenFile:
    """A data file a writer wrote: what the checkpoint's documents say of it, and the table's entry for it
    (pyiceberg's ``DataFile``: its partition, size and column statistics) that its snapshot adds."""

    file: TableFile
    data_file: DataFile


#: A data file's key among a writer's: its source partition (``topic:partition``) and its partition's values.
_FileKey = tuple[str, tuple[Any, ...]]


class SourceFiles:
    """The data files one writer (a Spark task, or the driver) writes to a `FileTarget`: one Parquet file per
    source partition (``topic:partition``) and table partition it is given rows of, named after the source and
    ``writer`` (unique among a checkpoint's writers, so that tasks never write the same file). Rows are gathered
    per file into row groups of about `ROW_GROUP_BYTES` (Spark hands a task's rows over in batches of 10,000) and
    streamed out. Each file's partition is computed by pyiceberg's own transforms (`_by_partition`)."""

    def __init__(self, target: FileTarget, writer: str) -> None:
        self.target, self.writer = target, writer
        self._open: dict[_FileKey, tuple[str, Any, Any]] = {}
        self._records: dict[_FileKey, int] = {}
        self._pending: dict[_FileKey, list[pa.Table]] = {}
        self._pending_bytes: dict[_FileKey, int] = {}

    def add(self, source: str, rows: pa.Table | pa.RecordBatch) -> None:
        """``rows``, all of ``source``, appended to its files (each opened on its first rows)."""
        import pyarrow as pa

        if not rows.num_rows:
            return
        table = rows if isinstance(rows, pa.Table) else pa.Table.from_batches([rows])
        try:
            parts = list(_by_partition(table, self.target))
        except Exception as exc:
            raise self._failed(source, exc) from exc
        for values, part in parts:
            key = (source, values)
            self._pending.setdefault(key, []).append(part)
            self._pending_bytes[key] = self._pending_bytes.get(key, 0) + part.nbytes
            self._records[key] = self._records.get(key, 0) + part.num_rows
            if self._pending_bytes[key] >= ROW_GROUP_BYTES:
                self._flush(key)

    def _flush(self, key: _FileKey) -> None:
        pending = self._pending.pop(key, [])
        self._pending_bytes.pop(key, None)
        if not pending:
            return
        try:
            self._write(key, pending)
        except Exception as exc:
            raise self._failed(key[0], exc) from exc

    def _write(self, key: _FileKey, pending: list[pa.Table]) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        if key not in self._open:
            from pyiceberg.io import load_file_io

            path = f"{self.target.folder}/{key[0].replace(':', '-')}-{self.writer}-{len(self._open)}.parquet"
            stream = load_file_io(dict(self.target.io_properties), path).new_output(path).create(overwrite=True)
            self._open[key] = (path, stream, pq.ParquetWriter(stream, self.target.schema,
                                                              **dict(self.target.parquet)))
        data = pa.concat_tables([t.cast(self.target.schema) for t in pending])
        self._open[key][2].write_table(data, row_group_size=data.num_rows)

    def close(self) -> list[WrittenFile]:
        """Every file finished and closed; what each holds, and its entry for the table."""
        for key in list(self._pending):
            self._flush(key)
        files = []
        for key, (path, stream, writer) in self._open.items():
            try:
                writer.close()
                size = stream.tell()
                stream.close()
                entry = _data_file(self.target, path, writer.writer.metadata, size, key[1])
            except Exception as exc:
                raise self._failed(key[0], exc) from exc
            files.append(WrittenFile(TableFile(path, self._records[key], (key[0],)), entry))
        self._open.clear()
        return files

    def _failed(self, source: str, exc: BaseException) -> Exception:
        """What a Spark task's failure says (the run's last line quotes it): the table, the source, the cause."""
        what = f"Iceberg table {self.target.table}: could not write the data file of {source} ({_cause(exc)})"
        if _transient(exc) or isinstance(exc, OSError):
            return TransientError(f"{what}; a retry may pass")
        return TerminalError(f"{what}. Check the table's storage (its location, the catalog connection's file IO "
                             "properties), then trigger the next run, which goes on from here")


class IcebergTable:
    """One table of one catalog connection."""

    def __init__(self, catalog_conn_id: str, name: str) -> None:
        self.conn_id = catalog_conn_id
        self.name = name
        self._catalog: Catalog | None = None

    # ---- the catalog ----------------------------------------------------------------------------------
    @property
    def catalog(self) -> Catalog:
        if self._catalog is None:
            from pyiceberg.catalog import load_catalog

            props = iceberg_catalog(self.conn_id)
            self._catalog = self._calling("reach the catalog", lambda: load_catalog(self.conn_id, **props))
        return self._catalog

    def load(self) -> Table:
        from pyiceberg.exceptions import NoSuchTableError

        try:
            return self._calling("load the table", lambda: self.catalog.load_table(self.name))
        except NoSuchTableError:
            raise TerminalError(f"Iceberg table {self.name} does not exist in the catalog of connection "
                                f"{self.conn_id} (was it dropped or renamed?): its checkpoints' rows cannot be "
                                "published or read. Register it again from its metadata file (the catalog's "
                                "register_table), or point sink.iceberg.table at it; the next run's plan then "
                                "completes what is prepared (docs/iceberg.md)") from None

    def exists(self) -> bool:
        return bool(self._calling("look up the table", lambda: self.catalog.table_exists(self.name)))

    # ---- the run ---------------------------------------------------------------------------------------
    def ready_for(self, schema: pa.Schema, partitioning: Sequence[TablePartition] | None = None) -> Table:
        """The table, created with ``schema`` (and its namespace) when missing, partitioned by ``partitioning``, or
        with the columns ``schema`` adds and the types it widens applied; a change Iceberg does not allow is refused,
        naming the column. A table that exists must be partitioned as ``partitioning`` says (None: as it is)."""
        from pyiceberg.exceptions import NamespaceAlreadyExistsError, NoSuchTableError, TableAlreadyExistsError

        try:
            found: Table | None = self._calling("load the table", lambda: self.catalog.load_table(self.name))
        except NoSuchTableError:
            found = None
        if found is None:
            namespace = self.name.rsplit(".", 1)[0]
            try:
                self._calling("create the namespace", lambda: self.catalog.create_namespace(namespace))
            except NamespaceAlreadyExistsError:
                pass
            try:
                table = self._created(schema, partitioning or ())
                # A branch is made from a snapshot: the new table's main starts with an empty one.
                with self._transaction(table) as tx:
                    with tx.update_snapshot(snapshot_properties={SUMMARY_CREATED: "lockstep"}).fast_append():
                        pass
            except TableAlreadyExistsError:
                pass  # another run made it first
        table = found if found is not None else self.load()
        if partitioning is not None:
            self._check_partitioning(table, partitioning)
        if table.current_snapshot() is None:
            with self._transaction(table) as tx:
                with tx.update_snapshot(snapshot_properties={SUMMARY_CREATED: "lockstep"}).fast_append():
                    pass
            table = self.load()
        table = self._evolved(table, schema)
        if table.metadata.name_mapping() is None:
            # The data files carry no field ids: readers find their columns by name (as pyiceberg's add_files sets).
            from pyiceberg.table import TableProperties

            mapping = table.schema().name_mapping.model_dump_json()
            with self._transaction(table) as tx:
                tx.set_properties(**{TableProperties.DEFAULT_NAME_MAPPING: mapping})
            table = self.load()
        return table

    def _created(self, schema: pa.Schema, partitioning: Sequence[TablePartition]) -> Table:
        """The table created with ``schema``, partitioned by ``partitioning`` (a column it lacks, or a transform its
        type does not take, refused by name), in one commit."""
        from pyiceberg.transforms import parse_transform

        missing = [str(p) for p in partitioning if p.column not in schema.names]
        if missing:
            raise TerminalError(f"Iceberg table {self.name}: sink.iceberg.partitioning names "
                                f"{', '.join(missing)}, but the transform's output has no such column (its columns: "
                                f"{', '.join(schema.names)}). Partition by columns the output has")
        tx = self._calling("create the table", lambda: self.catalog.create_table_transaction(self.name, schema=schema))
        try:
            if partitioning:
                with tx.update_spec() as update:
                    for p in partitioning:
                        update.add_field(p.column, parse_transform(p.transform))
        except (ValueError, TypeError) as exc:
            raise TerminalError(f"Iceberg table {self.name}: sink.iceberg.partitioning cannot partition the output "
                                f"so: {_cause(exc)}. Time transforms take timestamps and dates; truncate takes "
                                "strings, binaries and integers") from exc
        return self._calling("create the table", tx.commit_transaction)  # another run's table: raised as it is

    def _check_partitioning(self, table: Table, partitioning: Sequence[TablePartition]) -> None:
        """A table that exists is partitioned as declared, or the run stops naming both: Lockstep never changes a
        table's partitioning on its own."""
        schema = table.schema()
        found = tuple((schema.find_column_name(f.source_id), str(f.transform)) for f in table.spec().fields)
        if found == tuple((p.column, p.transform) for p in partitioning):
            return
        from lockstep.spec import TablePartition

        said = ", ".join(map(str, partitioning)) or "none"
        has = ", ".join(str(TablePartition(str(c), t)) for c, t in found) or "none"
        raise TerminalError(f"Iceberg table {self.name} is partitioned by [{has}], but sink.iceberg.partitioning "
                            f"says [{said}]: Lockstep does not change a table's partitioning. Set "
                            "sink.iceberg.partitioning to the table's, or evolve the table's partition spec first "
                            "(Spark SQL's ALTER TABLE ... ADD/DROP PARTITION FIELD, or pyiceberg's update_spec; "
                            "docs/iceberg.md), then trigger the next run")

    def _evolved(self, table: Table, schema: pa.Schema) -> Table:
        if _fits(table, schema):
            return table
        try:
            with table.update_schema() as update:
                update.union_by_name(schema)
        except (TransientError, TerminalError):
            raise
        except Exception as exc:
            if _transient(exc):
                raise TransientError(f"Iceberg table {self.name}: could not evolve its schema: {_cause(exc)}") from exc
            raise TerminalError(
                f"Iceberg table {self.name}: the transform's output does not fit the table's schema: {_cause(exc)}. "
                "Iceberg allows adding a column and widening a type (int to long, float to double, a decimal's "
                "precision); change the transform's output back, or migrate the table (docs/iceberg.md)") from exc
        return self.load()

    def target(self, pipeline: str, checkpoint_id: int, schema: pa.Schema,
               partitioning: Sequence[TablePartition] | None = None) -> FileTarget:
        """Where checkpoint ``checkpoint_id``'s data files go, the table made or evolved for ``schema`` first (and
        partitioned by ``partitioning``, `ready_for`); an earlier attempt's branch is dropped (its files are left as
        orphans)."""
        table = self.ready_for(schema, partitioning)
        branch = branch_name(pipeline, checkpoint_id)
        if branch in table.metadata.refs:
            self._calling("drop an earlier attempt's branch",
                          lambda: table.manage_snapshots().remove_branch(branch).commit())
            table = self.load()
        folder = f"{checkpoint_folder(table.location(), pipeline, checkpoint_id)}/{uuid.uuid4().hex[:12]}"
        return FileTarget(self.name, folder, schema, dict(table.io.properties), parquet_options(table.properties),
                          table.schema(), table.spec(), dict(table.properties))

    def stage_files(self, pipeline: str, checkpoint_id: int, files: Sequence[WrittenFile]) -> StagedTable:
        """One snapshot adding ``files`` (written under this checkpoint's `target`) staged on the checkpoint's
        branch, its summary naming the pipeline and the checkpoint; no files, nothing staged."""
        branch = branch_name(pipeline, checkpoint_id)
        if not files:
            return StagedTable(self.conn_id, self.name, branch, None)
        table = self.load()
        props = {SUMMARY_PIPELINE: pipeline, SUMMARY_CHECKPOINT: str(checkpoint_id)}
        with self._transaction(table) as tx:
            with tx.update_snapshot(snapshot_properties=props, branch=branch).fast_append() as append:
                for f in files:
                    append.append_data_file(f.data_file)
        # The table's metadata is the commit's answer: no load again.
        staged = table.snapshot_by_name(branch) or self.load().snapshot_by_name(branch)
        if staged is None:
            raise TransientError(f"Iceberg table {self.name}: the snapshot staged on branch {branch} is not there")
        return StagedTable(self.conn_id, self.name, branch, staged.snapshot_id, tuple(f.file for f in files))

    def stage(self, pipeline: str, checkpoint_id: int, rows: Sequence[RowsOfSource], schema: pa.Schema,
              written: Callable[[], None] = lambda: None,
              partitioning: Sequence[TablePartition] | None = None) -> StagedTable:
        """`target`, each source partition's rows written there as a data file (`SourceFiles`, here), then
        `stage_files`: the driver's way, for rows it holds. ``written``: called once the files are written, before
        the snapshot is staged (a failpoint)."""
        if not rows:
            return StagedTable(self.conn_id, self.name, branch_name(pipeline, checkpoint_id), None)
        files = SourceFiles(self.target(pipeline, checkpoint_id, schema, partitioning), "driver")
        for part in rows:
            files.add(part.source, part.rows)
        written_files = self._calling("write a data file", files.close)
        written()
        return self.stage_files(pipeline, checkpoint_id, written_files)

    # ---- the commit ------------------------------------------------------------------------------------
    def observe(self, pipeline: str, checkpoint_id: int, staged: StagedTable) -> Observed:
        """Whether main holds the checkpoint's snapshot (found in main's history by its summary, newest first, up
        to an earlier checkpoint of the pipeline), and whether its staged snapshot is still on its branch."""
        table = self.load()
        ref = table.metadata.refs.get(staged.branch)
        return Observed(published(table, pipeline, checkpoint_id),
                        ref is not None and ref.snapshot_id == staged.snapshot_id)

    def publish(self, pipeline: str, checkpoint_id: int, staged: StagedTable, files: Sequence[TableFile]) -> int:
        """One snapshot on main adding ``files`` of the staged snapshot, named after the checkpoint; its id.
        Published already: that snapshot's id, nothing added."""
        from pyiceberg.exceptions import CommitFailedException

        wanted = {f.path for f in files}
        for attempt in range(PUBLISH_ATTEMPTS):
            table = self.load()
            done = published(table, pipeline, checkpoint_id)
            if done is not None:
                return done
            snapshot = table.snapshot_by_id(staged.snapshot_id) if staged.snapshot_id is not None else None
            if snapshot is None:
                raise TerminalError(f"Iceberg table {self.name}: the snapshot checkpoint {checkpoint_id} staged "
                                    f"({staged.snapshot_id}, branch {staged.branch}) is gone and was never "
                                    "published (was the branch removed?): its rows are missing from the table. Run "
                                    "`lockstep verify` to see which, and write them again with a savepoint's "
                                    "backfill (docs/iceberg.md)")
            data_files = [entry.data_file for manifest in snapshot.manifests(table.io)
                          if manifest.added_snapshot_id == snapshot.snapshot_id
                          for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True)
                          if entry.data_file.file_path in wanted]
            missing = wanted - {d.file_path for d in data_files}
            if missing:
                raise TerminalError(f"Iceberg table {self.name}: the staged snapshot of checkpoint {checkpoint_id} "
                                    f"lacks {len(missing)} of its files ({sorted(missing)[0]} ...)")
            props = {SUMMARY_PIPELINE: pipeline, SUMMARY_CHECKPOINT: str(checkpoint_id)}
            try:
                with table.transaction() as tx:
                    with tx.update_snapshot(snapshot_properties=props).fast_append() as append:
                        for data_file in data_files:
                            append.append_data_file(data_file)
            except CommitFailedException:
                if attempt == PUBLISH_ATTEMPTS - 1:
                    raise TransientError(f"Iceberg table {self.name}: publishing checkpoint {checkpoint_id} met other "
                                         f"writers' commits {PUBLISH_ATTEMPTS} times; the commit retries") from None
                continue
            except Exception as exc:
                raise self._failure("publish the snapshot", exc) from exc
        done = published(self.load(), pipeline, checkpoint_id)
        if done is None:
            raise TransientError(f"Iceberg table {self.name}: checkpoint {checkpoint_id}'s snapshot is not on main "
                                 "after its publish; the commit retries")
        return done

    def drop(self, branch: str) -> bool:
        """The branch removed (its snapshot's files become orphans); False when it was not there."""
        table = self.load()
        if branch not in table.metadata.refs:
            return False
        self._calling("drop the branch", lambda: table.manage_snapshots().remove_branch(branch).commit())
        return True

    def branches(self, pipeline: str) -> dict[int, str]:
        """The pipeline's staged branches by checkpoint id."""
        prefix = f"{BRANCH_PREFIX}{pipeline}-"
        found = {}
        for name in self.load().metadata.refs:
            if name.startswith(prefix) and name[len(prefix):].isdigit():
                found[int(name[len(prefix):])] = name
        return found

    # ---- verify ----------------------------------------------------------------------------------------
    def provenance(self, since: int | None = None) -> Counter[tuple[str, int, int]]:
        """How many rows on main each input record ``(topic, partition, offset)`` has (of checkpoints from
        ``since`` on); empty when the table does not exist yet."""
        from collections import Counter

        if not self.exists():
            return Counter()
        table = self.load()
        where = f"{PROVENANCE_COLUMNS[3]} >= {int(since)}" if since else "True"
        arrow = self._calling("read the table", lambda: table.scan(row_filter=where,
                                                                   selected_fields=PROVENANCE_COLUMNS[:3]).to_arrow())
        return Counter(zip(*(arrow[c].to_pylist() for c in PROVENANCE_COLUMNS[:3]), strict=True))

    def published_checkpoints(self, pipeline: str) -> list[int]:
        """The pipeline's checkpoints that main's history holds a snapshot of, oldest first."""
        if not self.exists():
            return []
        table = self.load()
        by_id = {s.snapshot_id: s for s in table.metadata.snapshots}
        found, current = [], table.current_snapshot()
        while current is not None:
            props = _properties(current)
            if props.get(SUMMARY_PIPELINE) == pipeline and SUMMARY_CHECKPOINT in props:
                found.append(int(props[SUMMARY_CHECKPOINT]))
            parent = current.parent_snapshot_id
            current = by_id.get(parent) if parent is not None else None
        return found[::-1]

    # ---- upkeep ----------------------------------------------------------------------------------------
    def data_files(self) -> int:
        """How many data files main's current snapshot reads."""
        if not self.exists():
            return 0
        return sum(1 for _ in self.load().scan().plan_files())

    def compact(self, before: int) -> tuple[int, int, int]:
        """The rows of checkpoints before ``before`` rewritten into as few files as Iceberg's target size allows, in
        one snapshot that replaces their files (an overwrite: the same rows, nothing else changes). Returns the files
        replaced, the files written and the rows; (0, 0, 0) when there is nothing to merge (at most one file)."""
        from pyiceberg.exceptions import CommitFailedException

        column = PROVENANCE_COLUMNS[3]
        where = f"{column} < {int(before)}"
        for _ in range(PUBLISH_ATTEMPTS):
            table = self.load()
            old = sum(1 for _ in table.scan(row_filter=where).plan_files())
            if old <= 1:
                return 0, 0, 0
            scan = table.scan(row_filter=where)
            rows = self._calling("read the rows to compact", scan.to_arrow)
            try:
                with table.transaction() as tx:
                    tx.overwrite(rows, overwrite_filter=where,
                                 snapshot_properties={"lockstep.compacted-before": str(before)})
            except CommitFailedException:
                continue  # a checkpoint was published meanwhile: read again
            except Exception as exc:
                raise self._failure("compact the table", exc) from exc
            table = self.load()
            return old, sum(1 for _ in table.scan(row_filter=where).plan_files()), rows.num_rows
        raise TransientError(f"Iceberg table {self.name}: the compaction met other commits {PUBLISH_ATTEMPTS} times; "
                             "run it again")

    def expire(self, older_than_ms: int, completed: Mapping[str, int | None]) -> int:
        """Expire the snapshots older than ``older_than_ms`` (epoch ms) that no ref points at, but never one that
        names a checkpoint of a pipeline of ``completed`` after its latest completed checkpoint (None: any): a commit
        that runs again finds its checkpoint's snapshot in main's history, so it must stay there. ``completed``: every
        pipeline writing the table (a pipeline and its dead-letter replays). Returns how many."""
        table = self.load()
        heads = {ref.snapshot_id for ref in table.metadata.refs.values()}
        doomed = []
        for snapshot in table.metadata.snapshots:
            props = _properties(snapshot)
            pipeline = props.get(SUMMARY_PIPELINE)
            latest = completed.get(pipeline) if pipeline is not None else None
            pending = (pipeline in completed and SUMMARY_CHECKPOINT in props
                       and (latest is None or int(props[SUMMARY_CHECKPOINT]) > latest))
            if snapshot.timestamp_ms < older_than_ms and snapshot.snapshot_id not in heads and not pending:
                doomed.append(snapshot.snapshot_id)
        if doomed:
            self._calling("expire snapshots", lambda: table.maintenance.expire_snapshots().by_ids(doomed).commit())
        return len(doomed)

    def orphans(self, older_than_ms: int, in_flight: Mapping[str, Collection[int]] | None = None) -> list[Orphan]:
        """The files under the table's data folder that no snapshot of the table reads (on any branch, or still in
        any history), last written before ``older_than_ms`` (epoch ms), and not in the folder of a checkpoint
        ``in_flight`` (by pipeline: not completed or aborted yet, so a run of it may be writing there):
        the files of run attempts that died before their snapshot was staged, of aborted checkpoints' dropped
        branches, and of snapshots expired since. The table's metadata folder is never looked at."""
        from pyarrow.fs import FileSelector, FileType
        from pyiceberg.io.pyarrow import PyArrowFileIO

        table = self.load()
        read = set(self._calling("list the files the snapshots read", table.inspect.all_files)["file_path"]
                   .to_pylist())
        io = table.io if isinstance(table.io, PyArrowFileIO) else PyArrowFileIO(dict(table.io.properties))
        scheme, netloc, root = io.parse_location(f"{table.location().rstrip('/')}/data")
        fs = io.fs_by_scheme(scheme, netloc)
        listed = self._calling("list the table's data folder",
                               lambda: fs.get_file_info(FileSelector(root, recursive=True, allow_not_found=True)))
        prefix = f"{scheme}://"
        spared = tuple(f"{checkpoint_folder(table.location(), pipeline, cid)}/"
                       for pipeline, ids in (in_flight or {}).items() for cid in ids)
        found = []
        for info in listed:
            if info.type != FileType.File or info.mtime is None:
                continue
            path = prefix + info.path
            if path in read or path.startswith(spared) or info.mtime.timestamp() * 1000 >= older_than_ms:
                continue
            found.append(Orphan(path, info.size or 0))
        return found

    def remove(self, orphans: Sequence[Orphan]) -> int:
        """The ``orphans`` deleted (one already gone counts as removed); how many."""
        from functools import partial

        io = self.load().io
        for orphan in orphans:
            self._calling(f"delete {orphan.path}", partial(io.delete, orphan.path))
        return len(orphans)

    # ---- errors ----------------------------------------------------------------------------------------
    @contextmanager
    def _transaction(self, table: Table) -> Iterator[Any]:
        try:
            with table.transaction() as tx:
                yield tx
        except (TransientError, TerminalError):
            raise
        except Exception as exc:
            raise self._failure("commit to the table", exc) from exc

    def _calling(self, what: str, call: Callable[[], T]) -> T:
        try:
            return call()
        except (TransientError, TerminalError):
            raise
        except Exception as exc:
            from pyiceberg.exceptions import NamespaceAlreadyExistsError, NoSuchTableError, TableAlreadyExistsError

            if isinstance(exc, (NamespaceAlreadyExistsError, TableAlreadyExistsError, NoSuchTableError)):
                raise
            raise self._failure(what, exc) from exc

    def _failure(self, what: str, exc: BaseException) -> Exception:
        cause = _cause(exc)
        where = f"Iceberg table {self.name} (catalog connection {self.conn_id})"
        if _transient(exc):
            return TransientError(f"{where}: could not {what}: {cause}; a retry may pass")
        return TerminalError(f"{where}: could not {what}: {cause}. Fix the catalog connection's properties or the "
                             "table's permissions, then trigger the next run, which goes on from here")


def checkpoint_folder(location: str, pipeline: str, checkpoint_id: int) -> str:
    """Where the run attempts of ``pipeline``'s checkpoint ``checkpoint_id`` write their data files, each in a
    folder of its own beneath: ``<location>/data/lockstep/<pipeline>/<checkpoint>``."""
    return f"{location.rstrip('/')}/data/lockstep/{pipeline}/{checkpoint_id}"


def parquet_options(properties: Mapping[str, str]) -> dict[str, Any]:
    """The Parquet writer's options a table's write properties ask for (``write.parquet.compression-codec``,
    zstd unless set, its level, page and dictionary sizes), as pyiceberg's own writes take them: Lockstep's data
    files are written as any other writer's of the table."""
    from pyiceberg.io.pyarrow import _get_parquet_writer_kwargs  # pyiceberg's one reading of them

    return {k: v for k, v in _get_parquet_writer_kwargs(dict(properties)).items() if v is not None}


def published(table: Table, pipeline: str, checkpoint_id: int) -> int | None:
    """The snapshot on main that published the pipeline's checkpoint, or None: main's history walked newest first,
    stopping at an earlier checkpoint of the pipeline (checkpoints are published in order)."""
    current = table.current_snapshot()
    by_id = {s.snapshot_id: s for s in table.metadata.snapshots}
    while current is not None:
        props = _properties(current)
        if props.get(SUMMARY_PIPELINE) == pipeline and current.snapshot_id in by_id:
            found = int(props.get(SUMMARY_CHECKPOINT, "-1"))
            if found == checkpoint_id:
                return current.snapshot_id
            if found < checkpoint_id:
                return None
        parent = current.parent_snapshot_id
        current = by_id.get(parent) if parent is not None else None
    return None


def _by_partition(rows: pa.Table, target: FileTarget) -> Iterator[tuple[tuple[Any, ...], pa.Table]]:
    """``rows`` by the table partition each falls in: the values of the target's partition fields (as Iceberg records
    them in a data file's entry), computed by pyiceberg's transforms; all of ``rows`` in one when the table is not
    partitioned, or when every row falls in one partition (most batches of a time partitioning)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    from pyiceberg.partitioning import partition_record_value

    spec, schema = target.spec, target.iceberg_schema
    if spec is None or not spec.fields:
        yield (), rows
        return
    keys = {}
    arrow = schema.as_arrow()
    for i, f in enumerate(spec.fields):
        source = schema.find_field(f.source_id)
        if source.name in rows.column_names:
            column = rows[source.name].combine_chunks()
            wanted = plain_type(arrow.field(source.name).type)
            keys[f"p{i}"] = f.transform.pyarrow_transform(source.field_type)(column.cast(wanted))
        else:  # not in this output: null, as the file's column reads back
            keys[f"p{i}"] = pa.nulls(rows.num_rows)

    def values(at: dict[str, Any]) -> tuple[Any, ...]:
        return tuple(partition_record_value(f, at[f"p{i}"], schema) for i, f in enumerate(spec.fields))

    if all(k.null_count in (0, len(k)) and len(pc.unique(k)) == 1 for k in keys.values()):
        yield values({name: k[0].as_py() for name, k in keys.items()}), rows
        return
    grouped = pa.table({**keys, "row": pa.array(range(rows.num_rows), pa.int64())}).group_by(
        list(keys), use_threads=False).aggregate([("row", "list")])
    for group in grouped.to_pylist():
        yield values(group), rows.take(pa.array(group["row_list"], pa.int64()))


def _data_file(target: FileTarget, path: str, metadata: Any, size: int, values: tuple[Any, ...]) -> DataFile:
    """The table's entry for a data file just written: its partition ``values`` and the column statistics of its
    Parquet ``metadata``, as pyiceberg's own writes record them."""
    from pyiceberg.io.pyarrow import (
        compute_statistics_plan,
        data_file_statistics_from_parquet_metadata,
        parquet_path_to_id_mapping,
    )
    from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
    from pyiceberg.typedef import Record

    schema = target.iceberg_schema
    stats = data_file_statistics_from_parquet_metadata(
        parquet_metadata=metadata, stats_columns=compute_statistics_plan(schema, dict(target.properties)),
        parquet_column_mapping=parquet_path_to_id_mapping(schema))
    return DataFile.from_args(content=DataFileContent.DATA, file_path=path, file_format=FileFormat.PARQUET,
                              partition=Record(*values), file_size_in_bytes=size, sort_order_id=None,
                              spec_id=target.spec.spec_id, equality_ids=None, key_metadata=None,
                              **stats.to_serialized_dict())


def plain_type(t: pa.DataType) -> pa.DataType:
    """Arrow's large strings and binaries as the files hold them and Iceberg reads them back (plain ones)."""
    import pyarrow as pa

    return pa.string() if t == pa.large_string() else pa.binary() if t == pa.large_binary() else t


def _properties(snapshot: Any) -> Mapping[str, str]:
    summary = snapshot.summary
    return dict(summary.additional_properties) if summary is not None else {}


def _fits(table: Table, schema: pa.Schema) -> bool:
    """Whether every column of ``schema`` is a column of the table of the same type (as Arrow reads it back)."""
    current = table.schema().as_arrow()
    names = set(current.names)
    return all(f.name in names and plain_type(current.field(f.name).type) == plain_type(f.type) for f in schema)


def _transient(exc: BaseException) -> bool:
    import requests
    from pyiceberg.exceptions import CommitFailedException, CommitStateUnknownException, ServiceUnavailableError

    transient = (requests.ConnectionError, requests.Timeout, ServiceUnavailableError, CommitFailedException,
                 CommitStateUnknownException, ConnectionError, TimeoutError)
    return isinstance(exc, transient) or "Connection" in type(exc).__name__ or "Timeout" in type(exc).__name__


def _cause(exc: BaseException) -> str:
    return redact(f"{type(exc).__name__}: {exc}".splitlines()[0][:500])
