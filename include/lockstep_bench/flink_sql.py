"""The Flink SQL peer's statements, built from the runner's end offsets: pure strings, no PyFlink.

The job (``include/lockstep_bench/jobs/flink_sql_job.py``) runs them in Flink's own Python venv; they live here so the
unit tests check them without Flink. The same work as every competitor (``lockstep_examples.bench``):
parse the JSON order, keep ``amount >= 30``, add ``amount_cents``, compact JSON out, the source
topic/partition/offset as headers. Flink parses with its ``json`` format (one parse per record,
its fastest path; ``JSON_VALUE`` per field would parse the text once per field) and filters and
computes in SQL. Two sinks share one scan: the exactly-once Kafka sink and a one-row count file
(records in, records out), which is how the job reports what it read without a second pass.
"""
from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from lockstep.model.output_contract import SOURCE_OFFSET, SOURCE_PARTITION, SOURCE_TOPIC
from lockstep_examples.bench import FIELDS, MIN_AMOUNT

#: Flink SQL types of the order's fields (``lockstep_examples.bench.FIELDS``).
SQL_TYPES = {"string": "STRING", "double": "DOUBLE", "long": "BIGINT"}
#: The producer settings every competitor uses (``lockstep.spark.writer_settings.THROUGHPUT_PRODUCER_CONFIG``).
PRODUCER = {"linger.ms": "20", "batch.size": "1000000", "compression.type": "lz4", "acks": "all"}


def specific_offsets(offsets: Mapping[int, int]) -> str:
    """Flink's ``partition:0,offset:0;partition:1,offset:0`` form, partitions in order."""
    return ";".join(f"partition:{p},offset:{o}" for p, o in sorted(offsets.items()))


def _with(options: Mapping[str, str]) -> str:
    return ",\n  ".join(f"'{k}' = '{v}'" for k, v in options.items())


def source_options(bootstrap: str, topic: str, ends: Mapping[int, int], group: str) -> dict[str, str]:
    """A bounded Kafka source over ``[0, end)`` of every partition, read_committed like the others, JSON."""
    return {
        "connector": "kafka", "topic": topic, "properties.bootstrap.servers": bootstrap,
        "properties.group.id": group, "properties.isolation.level": "read_committed",
        "scan.startup.mode": "specific-offsets", "scan.startup.specific-offsets": specific_offsets({p: 0 for p in ends}),
        "scan.bounded.mode": "specific-offsets", "scan.bounded.specific-offsets": specific_offsets(ends),
        "format": "json", "json.fail-on-missing-field": "false",
    }


def source_table(bootstrap: str, topic: str, ends: Mapping[int, int], group: str) -> str:
    """The order's fields and the record's topic, partition and offset (``source_options``)."""
    columns = ",\n  ".join(f"`{name}` {SQL_TYPES[kind]}" for name, kind in FIELDS)
    options = source_options(bootstrap, topic, ends, group)
    return (f"CREATE TEMPORARY TABLE src (\n  {columns},\n"
            "  `src_topic` STRING METADATA FROM 'topic' VIRTUAL,\n"
            "  `src_partition` INT METADATA FROM 'partition' VIRTUAL,\n"
            "  `src_offset` BIGINT METADATA FROM 'offset' VIRTUAL\n"
            f") WITH (\n  {_with(options)}\n)")


def sink_options(bootstrap: str, topic: str, transactional_id_prefix: str) -> dict[str, str]:
    """Flink's exactly-once Kafka sink, every job's: two-phase commit, one transaction per writer and
    checkpoint, the shared producer settings; the format options are each job's own."""
    return {
        "connector": "kafka", "topic": topic, "properties.bootstrap.servers": bootstrap,
        "sink.delivery-guarantee": "exactly-once", "sink.transactional-id-prefix": transactional_id_prefix,
        # Under the broker's transaction.max.timeout.ms whatever it is set to (Flink's default is 1 h).
        "properties.transaction.timeout.ms": "600000",
        **{f"properties.{k}": v for k, v in PRODUCER.items()},
    }


def sink_table(bootstrap: str, topic: str, transactional_id_prefix: str) -> str:
    """Flink's Kafka sink with its two-phase commit: one transaction per writer, committed at the end."""
    columns = ",\n  ".join(f"`{name}` {SQL_TYPES[kind]}" for name, kind in FIELDS)
    options = {**sink_options(bootstrap, topic, transactional_id_prefix), "format": "json"}
    return (f"CREATE TEMPORARY TABLE sink (\n  {columns},\n  `amount_cents` BIGINT,\n"
            "  `headers` MAP<STRING, BYTES> METADATA\n"
            f") WITH (\n  {_with(options)}\n)")


def counts_table(path: str) -> str:
    """One CSV row: records read, records kept."""
    return ("CREATE TEMPORARY TABLE counts (records_in BIGINT, records_out BIGINT) WITH (\n"
            f"  {_with({'connector': 'filesystem', 'path': path, 'format': 'csv'})}\n)")


def insert_sink() -> str:
    fields = ", ".join(f"`{name}`" for name, _ in FIELDS)
    headers = (f"MAP['{SOURCE_TOPIC}', CAST(`src_topic` AS BYTES), "
               f"'{SOURCE_PARTITION}', CAST(CAST(`src_partition` AS STRING) AS BYTES), "
               f"'{SOURCE_OFFSET}', CAST(CAST(`src_offset` AS STRING) AS BYTES)]")
    return (f"INSERT INTO sink SELECT {fields}, CAST(ROUND(`amount` * 100, 0) AS BIGINT) AS `amount_cents`, "
            f"{headers} AS `headers` FROM src WHERE `amount` >= {MIN_AMOUNT}")


def insert_counts() -> str:
    return (f"INSERT INTO counts SELECT COUNT(*), COALESCE(SUM(CASE WHEN `amount` >= {MIN_AMOUNT} THEN 1 ELSE 0 END), 0) "
            "FROM src")


def statements(bootstrap: str, source: str, sink: str, ends: Mapping[int, int], transactional_id_prefix: str,
               counts_path: str, group: str) -> tuple[list[str], list[str]]:
    """(DDL, the inserts run together as one job)."""
    return ([source_table(bootstrap, source, ends, group), sink_table(bootstrap, sink, transactional_id_prefix),
             counts_table(counts_path)], [insert_sink(), insert_counts()])


# ---- the freshness race (lockstep_bench.freshness) ----------------------------------------------------
def streaming_source_table(bootstrap: str, topic: str, partitions: int, group: str) -> str:
    """``source_table`` without an end: every partition from offset 0, read as the records arrive."""
    options = {k: v for k, v in source_options(bootstrap, topic, {p: 0 for p in range(partitions)}, group).items()
               if not k.startswith("scan.bounded.")}
    columns = ",\n  ".join(f"`{name}` {SQL_TYPES[kind]}" for name, kind in FIELDS)
    return (f"CREATE TEMPORARY TABLE src (\n  {columns},\n"
            "  `src_topic` STRING METADATA FROM 'topic' VIRTUAL,\n"
            "  `src_partition` INT METADATA FROM 'partition' VIRTUAL,\n"
            "  `src_offset` BIGINT METADATA FROM 'offset' VIRTUAL\n"
            f") WITH (\n  {_with(options)}\n)")


def streaming_statements(bootstrap: str, source: str, sink: str, partitions: int, transactional_id_prefix: str,
                         group: str) -> tuple[list[str], str]:
    """(DDL, the insert): the main race's transform over an unbounded source."""
    return ([streaming_source_table(bootstrap, source, partitions, group),
             sink_table(bootstrap, sink, transactional_id_prefix)], insert_sink())


def streaming_window_statements(bootstrap: str, source: str, sink: str, partitions: int, transactional_id_prefix: str,
                                group: str, window_s: int, out_of_orderness_s: int) -> tuple[list[str], str]:
    """(DDL, the insert): the windowed race's count per customer over an unbounded source, with the Kafka record's
    timestamp as the rowtime (the freshness race's windowed pipeline, ``lockstep_bench.freshness_windows``)."""
    options = {k: v for k, v in source_options(bootstrap, source, {p: 0 for p in range(partitions)}, group).items()
               if not k.startswith("scan.bounded.")}
    delay = f"INTERVAL '{out_of_orderness_s}' SECOND({len(str(out_of_orderness_s))})"
    table = ("CREATE TEMPORARY TABLE src (\n  `customer` STRING,\n"
             "  `ts` TIMESTAMP_LTZ(3) METADATA FROM 'timestamp' VIRTUAL,\n"
             f"  WATERMARK FOR `ts` AS `ts` - {delay}\n) WITH (\n  {_with(options)}\n)")
    return [table, window_sink_table(bootstrap, sink, transactional_id_prefix)], insert_windows(window_s)


# ---- the windowed race (lockstep_bench.windowed) ------------------------------------------------------
def window_source_table(bootstrap: str, topic: str, ends: Mapping[int, int], group: str,
                        out_of_orderness_s: int) -> str:
    """The keyed orders' customer and event time, a rowtime with the race's out-of-orderness as the
    watermark delay; Flink's Kafka source keeps a watermark per partition and takes the smallest."""
    options = source_options(bootstrap, topic, ends, group)
    return ("CREATE TEMPORARY TABLE src (\n  `customer` STRING,\n  `created_at` BIGINT,\n"
            "  `ts` AS TO_TIMESTAMP_LTZ(`created_at`, 0),\n"
            f"  WATERMARK FOR `ts` AS `ts` - INTERVAL '{out_of_orderness_s}' SECOND({len(str(out_of_orderness_s))})\n"
            f") WITH (\n  {_with(options)}\n)")


def window_sink_table(bootstrap: str, topic: str, transactional_id_prefix: str) -> str:
    """One record per window, the customer as its key, JSON with ISO-8601 times (UTC session zone)."""
    options = {
        **sink_options(bootstrap, topic, transactional_id_prefix),
        "key.format": "raw", "key.fields": "customer",
        "value.format": "json", "value.fields-include": "ALL", "value.json.timestamp-format.standard": "ISO-8601",
    }
    return ("CREATE TEMPORARY TABLE sink (\n  `customer` STRING,\n  `window_start` TIMESTAMP(3),\n"
            f"  `window_end` TIMESTAMP(3),\n  `orders` BIGINT\n) WITH (\n  {_with(options)}\n)")


def insert_windows(window_s: int) -> str:
    return ("INSERT INTO sink SELECT `customer`, window_start, window_end, COUNT(*) AS `orders` "
            f"FROM TABLE(TUMBLE(TABLE src, DESCRIPTOR(`ts`), INTERVAL '{window_s}' SECOND({len(str(window_s))}))) "
            "GROUP BY `customer`, window_start, window_end")


def window_statements(bootstrap: str, source: str, sink: str, ends: Mapping[int, int], transactional_id_prefix: str,
                      group: str, window_s: int, out_of_orderness_s: int) -> tuple[list[str], str]:
    """(DDL, the insert) of the windowed count per customer."""
    return ([window_source_table(bootstrap, source, ends, group, out_of_orderness_s),
             window_sink_table(bootstrap, sink, transactional_id_prefix)], insert_windows(window_s))


# ---- the join race (lockstep_bench.joins) --------------------------------------------------------------
def join_orders_table(bootstrap: str, topic: str, ends: Mapping[int, int], group: str, out_of_orderness_s: int) -> str:
    """The orders (bounded, read_committed, JSON) with ``created_at`` as their rowtime: the time each
    order looks its customer up AS OF."""
    options = source_options(bootstrap, topic, ends, group)
    return ("CREATE TEMPORARY TABLE orders (\n  `order_id` STRING,\n  `customer` STRING,\n  `amount` DOUBLE,\n"
            "  `created_at` BIGINT,\n  `ts` AS TO_TIMESTAMP_LTZ(`created_at`, 0),\n"
            f"  WATERMARK FOR `ts` AS `ts` - INTERVAL '{out_of_orderness_s}' SECOND({len(str(out_of_orderness_s))})\n"
            f") WITH (\n  {_with(options)}\n)")


def customers_options(bootstrap: str, topic: str, ends: Mapping[int, int], group: str) -> dict[str, str]:
    """``upsert-kafka`` over the customers topic: the key (raw bytes as text) is the primary key, the value
    JSON (null: a delete), bounded at the runner's end offsets so that the job ends (upsert-kafka always
    starts from the earliest offsets), read_committed like every reader of the race."""
    return {
        "connector": "upsert-kafka", "topic": topic, "properties.bootstrap.servers": bootstrap,
        "properties.group.id": group, "properties.isolation.level": "read_committed",
        "scan.bounded.mode": "specific-offsets", "scan.bounded.specific-offsets": specific_offsets(ends),
        "key.format": "raw", "value.format": "json", "value.fields-include": "EXCEPT_KEY",
        "value.json.fail-on-missing-field": "false",
    }


def join_customers_table(bootstrap: str, topic: str, ends: Mapping[int, int], group: str) -> str:
    """The versioned table: primary key ``id`` (the record key), the version's time the Kafka record's
    timestamp (the race produces every customer with a timestamp before the first order) and a watermark
    on it, which an event-time temporal join requires of its versioned side."""
    return ("CREATE TEMPORARY TABLE customers (\n  `id` STRING,\n  `name` STRING,\n  `tier` STRING,\n"
            "  `country` STRING,\n  `version_ts` TIMESTAMP_LTZ(3) METADATA FROM 'timestamp' VIRTUAL,\n"
            "  PRIMARY KEY (`id`) NOT ENFORCED,\n  WATERMARK FOR `version_ts` AS `version_ts`\n"
            f") WITH (\n  {_with(customers_options(bootstrap, topic, ends, group))}\n)")


#: The enriched order's columns, in order (every engine's output record).
JOIN_OUTPUT = ("order_id", "customer", "amount", "name", "tier")


def join_sink_table(bootstrap: str, topic: str, transactional_id_prefix: str) -> str:
    """The enriched order as JSON, the customer as its key, exactly once."""
    options = {**sink_options(bootstrap, topic, transactional_id_prefix), "key.format": "raw",
               "key.fields": "customer", "value.format": "json", "value.fields-include": "ALL"}
    return ("CREATE TEMPORARY TABLE sink (\n  `order_id` STRING,\n  `customer` STRING,\n  `amount` DOUBLE,\n"
            f"  `name` STRING,\n  `tier` STRING\n) WITH (\n  {_with(options)}\n)")


#: How the Flink job joins: ``temporal`` is the event-time temporal join the issue names; ``regular`` the
#: closest equivalent without event time (a regular join on the upsert table, each order against its
#: customer's latest row), the fallback the benchmark labels as such.
JOIN_KINDS = ("temporal", "regular")


def insert_join(kind: str = "temporal") -> str:
    """Each order with its customer's name and tier (an inner join: an order without a customer has no output)."""
    if kind not in JOIN_KINDS:
        raise ValueError(f"join kind {kind!r}: one of {', '.join(JOIN_KINDS)}")
    version = " FOR SYSTEM_TIME AS OF o.`ts`" if kind == "temporal" else ""
    return ("INSERT INTO sink SELECT o.`order_id`, o.`customer`, o.`amount`, c.`name`, c.`tier` "
            f"FROM orders AS o JOIN customers{version} AS c ON o.`customer` = c.`id`")


def join_statements(bootstrap: str, orders: str, orders_ends: Mapping[int, int], customers: str,
                    customers_ends: Mapping[int, int], sink: str, transactional_id_prefix: str, group: str,
                    out_of_orderness_s: int, kind: str = "temporal") -> tuple[list[str], str]:
    """(DDL, the insert) of the join race's enrichment."""
    return ([join_orders_table(bootstrap, orders, orders_ends, group, out_of_orderness_s),
             join_customers_table(bootstrap, customers, customers_ends, group),
             join_sink_table(bootstrap, sink, transactional_id_prefix)], insert_join(kind))


def checkpointed_configuration(scratch: str, parallelism: int, checkpoint_s: int, connector_jar_uri: str) -> dict[str, str]:
    """The bounded streaming jobs' Flink settings (the windowed and the join race): the Kafka connector,
    parallelism, UTC, RocksDB state with incremental exactly-once checkpoints every ``checkpoint_s`` into
    ``scratch`` (a local folder, gone with the job)."""
    checkpoints = (Path(scratch) / "checkpoints").as_uri()
    return {
        "pipeline.jars": connector_jar_uri,
        "parallelism.default": str(parallelism),
        "io.tmp.dirs": scratch,
        "web.upload.dir": scratch,
        "table.local-time-zone": "UTC",
        "state.backend.type": "rocksdb",
        "execution.checkpointing.incremental": "true",
        "execution.checkpointing.interval": f"{checkpoint_s}s",
        "execution.checkpointing.mode": "EXACTLY_ONCE",
        "execution.checkpointing.dir": checkpoints,
        "state.checkpoints.dir": checkpoints,
    }


# ---- the keyed-state restore (lockstep_bench.flink_restore) --------------------------------------------
#: Lockstep's dedup TTL (``lockstep_bench.keyed_state.TTL``) in Flink's duration syntax.
STATE_TTL = "400 d"
#: CLAIM: the restored job owns the retained checkpoint and its first checkpoint is incremental on it,
#: as Lockstep's next checkpoint builds on the state on S3. NO_CLAIM (Flink's default) makes the first
#: checkpoint after a restore a full one (RocksDB uploads every file again).
CLAIM_MODES = ("CLAIM", "NO_CLAIM")


def unbounded_source_options(bootstrap: str, topic: str, group: str) -> dict[str, str]:
    """An unbounded Kafka source from the earliest offsets, read_committed, JSON. No ``scan.bounded.mode``:
    a bounded job's last checkpoint marks its splits finished, and a job restored from it reads nothing.
    Flink commits the group's offsets when a checkpoint completes (the Kafka source's default), which
    is how the bench sees how far a checkpoint got; a restored job starts from the checkpoint's offsets,
    whatever the startup mode."""
    return {
        "connector": "kafka", "topic": topic, "properties.bootstrap.servers": bootstrap,
        "properties.group.id": group, "properties.isolation.level": "read_committed",
        "scan.startup.mode": "earliest-offset",
        "format": "json", "json.fail-on-missing-field": "false",
    }


def dedup_source_table(bootstrap: str, topic: str, group: str) -> str:
    """The order's fields and a processing-time attribute (the dedup's order)."""
    columns = ",\n  ".join(f"`{name}` {SQL_TYPES[kind]}" for name, kind in FIELDS)
    return (f"CREATE TEMPORARY TABLE src (\n  {columns},\n  `proc_time` AS PROCTIME()\n"
            f") WITH (\n  {_with(unbounded_source_options(bootstrap, topic, group))}\n)")


def dedup_sink_table(bootstrap: str, topic: str, transactional_id_prefix: str) -> str:
    """The first order of each ``order_id``, as JSON, exactly once."""
    columns = ",\n  ".join(f"`{name}` {SQL_TYPES[kind]}" for name, kind in FIELDS)
    options = {**sink_options(bootstrap, topic, transactional_id_prefix), "format": "json"}
    return f"CREATE TEMPORARY TABLE sink (\n  {columns}\n) WITH (\n  {_with(options)}\n)"


def insert_dedup() -> str:
    """Flink's keep-first-row deduplication on processing time: ``ROW_NUMBER() ... ORDER BY proc_time ASC``
    and ``= 1``, which Flink plans as its cheapest dedup, one flag per key in state and an append-only
    output. It favours Flink: Lockstep's dedup keeps each key's first event time (it dedups in event
    time, with a TTL from it), more bytes per key than a flag."""
    fields = ", ".join(f"`{name}`" for name, _ in FIELDS)
    return (f"INSERT INTO sink SELECT {fields} FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY `order_id` "
            "ORDER BY `proc_time` ASC) AS `row_num` FROM src) WHERE `row_num` = 1")


def dedup_statements(bootstrap: str, source: str, sink: str, transactional_id_prefix: str,
                     group: str) -> tuple[list[str], str]:
    """(DDL, the insert) of the keyed-state restore job's dedup by ``order_id``."""
    return ([dedup_source_table(bootstrap, source, group), dedup_sink_table(bootstrap, sink, transactional_id_prefix)],
            insert_dedup())


#: The restore job's managed memory (RocksDB's), as big as the Lockstep Connect server's heap is not: 1 GiB.
MANAGED_MEMORY = "1g"


def restore_configuration(checkpoint_dir: str, checkpoint_s: float, parallelism: int, rest_port: int,
                          restore_from: str | None = None, claim_mode: str = "CLAIM") -> dict[str, str]:
    """The restore job's Flink settings (Flink 2.x keys): streaming RocksDB state with incremental checkpoints
    every ``checkpoint_s`` into ``checkpoint_dir`` (a URI), kept when the job is cancelled; the dedup's
    state TTL; the REST endpoint on ``rest_port``; ``restore_from``: the retained checkpoint (its
    ``chk-N`` folder) the job restores its state and offsets from, in ``claim_mode``."""
    if claim_mode not in CLAIM_MODES:
        raise ValueError(f"claim mode {claim_mode!r}: one of {', '.join(CLAIM_MODES)}")
    conf = {
        "parallelism.default": str(parallelism),
        "table.local-time-zone": "UTC",
        "table.exec.state.ttl": STATE_TTL,
        "state.backend.type": "rocksdb",
        "execution.checkpointing.incremental": "true",
        "execution.checkpointing.interval": f"{int(checkpoint_s * 1000)}ms",
        "execution.checkpointing.mode": "EXACTLY_ONCE",
        "execution.checkpointing.dir": checkpoint_dir,
        "execution.checkpointing.externalized-checkpoint-retention": "RETAIN_ON_CANCELLATION",
        "rest.port": str(rest_port),
        "rest.bind-port": str(rest_port),
        # RocksDB's memory (block cache, write buffers) is the managed memory, 128 MiB by default in a local
        # mini-cluster: too little for 10M keys (a Flink user sizes it to the state, as Lockstep's Connect server is).
        "taskmanager.memory.managed.size": MANAGED_MEMORY,
    }
    if restore_from:
        conf["execution.state-recovery.path"] = restore_from
        conf["execution.state-recovery.claim-mode"] = claim_mode
    return conf


def s3_configuration(endpoint: str, access_key: str, secret_key: str, region: str = "us-east-1") -> dict[str, str]:
    """Flink's S3 file system (the ``flink-s3-fs-hadoop`` plugin, which hands ``s3.*`` on to Hadoop's ``fs.s3a.*``)
    against an S3 server of its own endpoint, path-style as a local server serves it: where the restore job keeps
    its checkpoints when they go to S3, as a production Flink's do, so that a restore downloads its state as
    Lockstep's does on a new host."""
    return {"s3.endpoint": endpoint, "s3.endpoint.region": region, "s3.path.style.access": "true",
            "s3.access-key": access_key, "s3.secret-key": secret_key}


# ---- the Iceberg race (lockstep_bench.iceberg_race) ---------------------------------------------------
#: The Iceberg catalog's name in the job's statements.
ICEBERG_CATALOG = "ice"


def iceberg_catalog(uri: str, warehouse: str, s3_endpoint: str, access_key: str, secret_key: str,
                    region: str) -> str:
    """The platform's Iceberg REST catalog, its files on the S3 server through Iceberg's own S3 file IO."""
    options = {"type": "iceberg", "catalog-type": "rest", "uri": uri, "warehouse": warehouse,
               "io-impl": "org.apache.iceberg.aws.s3.S3FileIO", "s3.endpoint": s3_endpoint,
               "s3.path-style-access": "true", "s3.access-key-id": access_key, "s3.secret-access-key": secret_key,
               "client.region": region}
    return f"CREATE CATALOG {ICEBERG_CATALOG} WITH (\n  {_with(options)}\n)"


def iceberg_statements(bootstrap: str, source: str, ends: Mapping[int, int], table: str, group: str,
                       sink: str | None = None, transactional_id_prefix: str = "") -> tuple[list[str], list[str]]:
    """(DDL after the catalog's, the inserts run together as one job): the orders of at least ``MIN_AMOUNT`` into
    ``table`` (``namespace.name``, made here) with the order's fields, ``amount_cents``, ``value`` (the order as
    JSON, what the Kafka sink writes) and the source topic, partition and offset as columns; with ``sink``, the
    same records also to that Kafka topic exactly once (``insert_sink``), from the same scan."""
    namespace, name = table.split(".")
    target = f"{ICEBERG_CATALOG}.`{namespace}`.`{name}`"
    fields = ", ".join(f"`{n}`" for n, _ in FIELDS)
    cents = "CAST(ROUND(`amount` * 100, 0) AS BIGINT)"
    value = "JSON_OBJECT(" + ", ".join([f"KEY '{n}' VALUE `{n}`" for n, _ in FIELDS]
                                       + [f"KEY 'amount_cents' VALUE {cents}"]) + ")"
    columns = ", ".join(f"`{n}` {SQL_TYPES[k]}" for n, k in FIELDS)
    ddl = [f"CREATE DATABASE IF NOT EXISTS {ICEBERG_CATALOG}.`{namespace}`",
           f"CREATE TABLE {target} (\n  {columns}, `amount_cents` BIGINT, `value` STRING,\n"
           "  `src_topic` STRING, `src_partition` INT, `src_offset` BIGINT\n) WITH ('format-version' = '2')",
           source_table(bootstrap, source, ends, group)]
    inserts = [f"INSERT INTO {target} SELECT {fields}, {cents} AS `amount_cents`, {value} AS `value`, "
               f"`src_topic`, `src_partition`, `src_offset` FROM src WHERE `amount` >= {MIN_AMOUNT}"]
    if sink is not None:
        ddl.append(sink_table(bootstrap, sink, transactional_id_prefix))
        inserts.append(insert_sink())
    return ddl, inserts
