"""JSON orders -> validated and enriched orders; malformed ones -> dead-letter topic.

A Lockstep transform takes the Kafka DataFrame (key, value, topic, partition,
offset, ...) and returns one with ``value`` (and optionally ``key``, ``headers``)
plus an ``error`` column: rows whose ``error`` is not null go to the dead-letter
topic, keeping the input bytes as their value. ``topic``/``partition``/``offset``
must survive; they become provenance headers.
"""
from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import DoubleType, LongType, StringType, StructField, StructType

ORDER = StructType([
    StructField("order_id", StringType()),
    StructField("customer", StringType()),
    StructField("amount", DoubleType()),
    StructField("currency", StringType()),
])
CURRENCIES = ["EUR", "USD", "GBP"]
NOT_AN_ORDER = "not a JSON order with order_id"


def enrich(df: DataFrame) -> DataFrame:
    raw = F.col("value").cast("string")
    order = F.from_json(raw, ORDER, {"mode": "PERMISSIVE"})
    parsed = df.withColumn("order", order)
    error = (
        F.when(F.col("order").isNull() | F.col("order.order_id").isNull(), F.lit(NOT_AN_ORDER))
        .when(F.col("order.amount").isNull(), F.lit("amount missing or not a number"))
        .when(F.col("order.amount") < 0, F.lit("negative amount"))
        .when(~F.col("order.currency").isin(CURRENCIES), F.concat(F.lit("unknown currency "),
                                                                  F.coalesce(F.col("order.currency"), F.lit("null"))))
    )
    enriched = F.to_json(F.struct(
        F.col("order.order_id").alias("order_id"),
        F.col("order.customer").alias("customer"),
        F.col("order.amount").alias("amount"),
        F.col("order.currency").alias("currency"),
        F.round(F.col("order.amount") * 100).cast("long").alias("amount_cents"),
        (F.col("order.amount") >= 100).alias("priority"),
    ))
    return (
        parsed.withColumn("error", error)
        .withColumn("value", F.when(F.col("error").isNull(), enriched.cast("binary")).otherwise(F.col("value")))
        .withColumn("key", F.col("order.order_id").cast("binary"))
        .drop("order")
    )


def enrich_accepting_text(df: DataFrame) -> DataFrame:
    """``enrich``, "fixed" to accept what it rejects as not a JSON order: such a value is written to
    the sink as ``{"raw": <the text>}``; every other rejection (a negative amount, say) stands.
    The fixed transform of the dead-letter replay example and tests (`lockstep deadletters replay`)."""
    out = enrich(df)
    text = F.to_json(F.struct(F.col("value").cast("string").alias("raw"))).cast("binary")
    not_an_order = F.col("error") == F.lit(NOT_AN_ORDER)
    return (out.withColumn("value", F.when(not_an_order, text).otherwise(F.col("value")))
            .withColumn("error", F.when(not_an_order, F.lit(None).cast("string")).otherwise(F.col("error"))))


def passthrough(df: DataFrame) -> DataFrame:
    """Identity: every input record becomes one output record (used by the benchmarks and tests)."""
    return df


def enrich_with_headers(df: DataFrame) -> DataFrame:
    """``enrich``, plus a ``currency`` header on every record and the value as a string column.

    Shows the rest of the output contract: user ``headers`` (Spark's Kafka header type,
    ``array<struct<key: string, value: binary>>``) are written after Lockstep's provenance
    headers, and ``value``/``key`` may be strings as well as bytes.
    """
    out = enrich(df)
    currency = F.coalesce(F.get_json_object(F.col("value").cast("string"), "$.currency"), F.lit("?"))
    header = F.struct(F.lit("currency").alias("key"), currency.cast("binary").alias("value"))
    return out.withColumn("headers", F.array(header)).withColumn("value", F.col("value").cast("string"))


ORDER_WITH_TIME = StructType([*ORDER.fields, StructField("created_at", LongType())])


def parse(df: DataFrame) -> DataFrame:
    """The orders as columns for a stateful pipeline (``include/pipelines/orders_per_customer.yaml``):
    ``customer``, ``amount`` and ``created_at`` (epoch seconds) beside the input's own columns, which
    stay (bad and late orders go to the dead-letter topic as they came). Malformed orders get an
    ``error`` and never reach the windows."""
    order = F.from_json(F.col("value").cast("string"), ORDER_WITH_TIME, {"mode": "PERMISSIVE"})
    parsed = df.withColumn("order", order)
    error = (
        F.when(F.col("order").isNull() | F.col("order.order_id").isNull(), F.lit(NOT_AN_ORDER))
        .when(F.col("order.customer").isNull(), F.lit("customer missing"))
        .when(F.col("order.amount").isNull(), F.lit("amount missing or not a number"))
        .when(F.col("order.created_at").isNull(), F.lit("created_at missing or not epoch seconds"))
    )
    return (parsed.withColumn("error", error)
            .withColumn("order_id", F.col("order.order_id"))
            .withColumn("customer", F.col("order.customer"))
            .withColumn("amount", F.col("order.amount"))
            .withColumn("created_at", F.col("order.created_at"))
            .drop("order"))


#: The header `parse_with_headers` puts on each record: the input offset it was parsed from.
PARSED_OFFSET_HEADER = "parsed.offset"


def parse_with_headers(df: DataFrame) -> DataFrame:
    """``parse``, plus a `PARSED_OFFSET_HEADER` header on every record (its input offset): a stateful
    pipeline's outputs that are records of the transform (dedup's, dead letters) keep their own
    headers, so each carries the offset of the record it came from; a fired window carries none."""
    header = F.struct(F.lit(PARSED_OFFSET_HEADER).alias("key"), F.col("offset").cast("string").cast("binary").alias("value"))
    return parse(df).withColumn("headers", F.array(header))


def enrich_for_table(df: DataFrame) -> DataFrame:
    """``enrich``, plus the order's fields as columns of their own: what an Iceberg table beside the topic
    (``sink.iceberg``) gets as its columns, beside ``key`` and ``value`` (docs/iceberg.md). The writers read only
    their own columns; a dead letter's fields are null."""
    out = enrich(df)
    order = F.from_json(F.col("value").cast("string"), ORDER, {"mode": "PERMISSIVE"})
    fields = [order.getField(name).alias(name) for name in ("order_id", "customer", "amount", "currency")]
    return out.select("*", *[F.when(F.col("error").isNull(), f).alias(n) for f, n in
                             zip(fields, ("order_id", "customer", "amount", "currency"), strict=True)])


def order_columns(df: DataFrame) -> DataFrame:
    """The order's fields as the only columns (beside the provenance the table keeps, and the dead letters' error):
    a transform for a table without a topic (``sink.iceberg`` without ``sink.topic``), whose rows are these
    columns alone. No ``value``: a malformed order's dead letter carries its input's bytes, which Lockstep finds
    again by provenance (docs/iceberg.md)."""
    return enrich_for_table(df).select("topic", "partition", "offset", "error", "order_id", "customer", "amount",
                                       "currency")


def order_fields(df: DataFrame) -> DataFrame:
    """The order's fields out of the decoded JSON (``source.value: json`` without a schema: the VARIANT ``data``) as
    the only columns beside the provenance: a table alone's transform with no ``error`` column. The records that do
    not decode never reach it: Lockstep dead-letters them, counted in the checkpoint's own pass (docs/iceberg.md)."""
    data = F.col("data")
    return df.select("topic", "partition", "offset", *[F.variant_get(data, f"$.{name}", kind).alias(name) for name, kind in
                                                       (("order_id", "string"), ("customer", "string"),
                                                        ("amount", "double"))])
