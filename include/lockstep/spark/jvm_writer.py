"""The JVM writer, driven from Python: its settings document and the write through its data source
(``jvm/jvm-writer``), which keeps rows in the executor JVM."""
from __future__ import annotations

__all__ = [
    "jvm_settings",
]

import json
import uuid
from typing import TYPE_CHECKING

from lockstep.errors import TerminalError
from lockstep.model.output_contract import jvm_contract
from lockstep.model.transactional_ids import transactional_id_pattern
from lockstep.spark.writer_settings import THROUGHPUT_PRODUCER_CONFIG, WriterSettings

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from lockstep.spark.target import JobSession

#: The data source of Lockstep's JVM writer (``dev.lockstep.spark.LockstepKafkaSource``) and its options.
JVM_SINK_FORMAT = "lockstep-kafka"


#: The settings carry the producer config, SASL credentials included, so they are not an option of the
#: write: under Spark Connect the request's text, options included, becomes the jobs' description and
#: the operation's statement text, unredacted, in the event log. They go in the session's conf for the
#: write instead, under a key that is redacted where Spark lists session confs (it says ``secret``) and
#: is not ``spark.*`` (those are copied into every job's properties, which the event log does not redact).
JVM_SETTINGS_CONF_PREFIX = "dev.lockstep.spark.secret_settings."


JVM_WRITE_ID_OPTION = "write_id"


def jvm_settings(settings: WriterSettings) -> dict[str, object]:
    """The JVM writer's settings document (``TransactionalKafkaWriter.WriterSettings`` parses it)."""
    return {
        "bootstrap": settings.bootstrap,
        "producer_config": {k: str(v).lower() if isinstance(v, bool) else str(v)
                            for k, v in {**THROUGHPUT_PRODUCER_CONFIG, **settings.producer_config}.items()},
        "transactional_id_pattern": transactional_id_pattern(settings.id_prefix, settings.checkpoint_id),
        "pipeline": settings.pipeline, "checkpoint_id": settings.checkpoint_id, "timeout_ms": settings.timeout_ms,
        "sink_topic": settings.sink_topic, "dead_letter_topic": settings.dead_letter_topic,
        "sink_max_bytes": settings.sink_max_bytes, "sink_limit": settings.sink_limit,
        "dead_letter_max_bytes": settings.dead_letter_max_bytes, "dead_letter_limit": settings.dead_letter_limit,
        "routes": [{"topic": t, "max_bytes": m, "limit": why} for t, m, why in settings.routes],
        "failpoints": settings.failpoints,
        "contract": jvm_contract(),
    }


def write_with_jvm(spark: JobSession, out: DataFrame, settings: WriterSettings) -> list[str]:
    """Rows stay in the executor JVM: the ``lockstep-kafka`` data source (``jvm/jvm-writer``,
    built by ``make setup``) writes each Spark task's rows in one Kafka transaction, with the same
    transaction contract and the output contract it receives in its settings. Only the DataFrame API
    is used, so a classic session and a Spark Connect session take this same path.

    The settings go in the session's conf for the write (see `JVM_SETTINGS_CONF_PREFIX`). The driver
    keeps the tasks' result documents under a fresh write id; reading the source with that
    id returns them (one row per task) and releases them. Returns each task's result document."""
    write_id = str(uuid.uuid4())
    settings_key = JVM_SETTINGS_CONF_PREFIX + write_id
    spark.conf.set(settings_key, json.dumps(jvm_settings(settings)))
    try:
        out.write.format(JVM_SINK_FORMAT).mode("append").option(JVM_WRITE_ID_OPTION, write_id).save()
    except Exception as exc:
        from lockstep.spark.connect import fail_fast_after

        fail_fast_after(spark, exc)  # before the conf is cleaned below: a dead server refuses that at once
        if _data_source_missing(exc):
            raise TerminalError(
                f"Lockstep's JVM writer (data source {JVM_SINK_FORMAT}) is not on Spark's classpath (spark.jars "
                "must include lockstep-jvm-writer.jar; run `make setup` to build it)") from exc
        raise
    finally:
        spark.conf.unset(settings_key)  # the session may live on (Spark Connect): keep no credentials in it
    rows = spark.read.format(JVM_SINK_FORMAT).option(JVM_WRITE_ID_OPTION, write_id).load().collect()
    return [r["result"] for r in rows]


def _data_source_missing(exc: Exception) -> bool:
    """Spark's "data source not found" (classic: AnalysisException; Connect: its server-side twin)."""
    text = str(exc)
    return "DATA_SOURCE_NOT_FOUND" in text or f"Failed to find data source: {JVM_SINK_FORMAT}" in text
