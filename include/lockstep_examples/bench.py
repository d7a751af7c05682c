"""The benchmark transform, one definition per engine so every competitor does the same work.

Parse the JSON order, keep orders of at least ``MIN_AMOUNT`` (drops about 10% of the
generated input), add ``amount_cents``, serialize back to compact JSON. ``transform`` is the
Spark version (Lockstep's transform contract: ``DataFrame -> DataFrame`` keeping ``topic``,
``partition``, ``offset``), used by Lockstep and by Spark's own at-least-once job;
``transform_value`` is the same function on one record's bytes, used by the raw client loop.
``avro_transform`` is the same work on decoded records (``lockstep bench --formats-only``): Lockstep
decodes the registry-framed Avro ``ORDER_SCHEMA`` into ``data`` and encodes the returned ``data`` in
``ENRICHED_SCHEMA``, so the transform only filters and adds the field.
"""
from __future__ import annotations

import json
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

MIN_AMOUNT = 30.0

FIELDS = (("order_id", "string"), ("customer", "string"), ("amount", "double"), ("currency", "string"),
          ("created_at", "long"), ("note", "string"))


def transform(df: DataFrame) -> DataFrame:
    return _orders(df).withColumn("value", _order_json()).drop("o")


def json_transform(df: DataFrame) -> DataFrame:
    """``transform`` on the order Lockstep decoded (``source.value: {format: json, schema: ORDER_JSON_SCHEMA}``, as
    Flink's table declares ``'format' = 'json'``): the same filter and output, the parse done by the format."""
    from pyspark.sql import functions as F

    return df.filter(F.col("data.amount") >= MIN_AMOUNT).withColumn("value", _order_json("data")).drop("data")


def transform_for_table(df: DataFrame) -> DataFrame:
    """``transform``, and the order's fields and ``amount_cents`` as columns beside ``value``, from the same parse:
    the Iceberg race's table (``lockstep bench --iceberg-only``) has them as its columns, as the peer's has."""
    from pyspark.sql import functions as F

    orders = _orders(df)
    return orders.select(*[c for c in orders.columns if c not in ("o", "value")], _order_json().alias("value"),
                         *[F.col(f"o.{name}").alias(name) for name, _ in FIELDS], _cents().alias("amount_cents"))


def _orders(df: DataFrame) -> DataFrame:
    """The input with its order parsed (``o``), the orders of at least ``MIN_AMOUNT``."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import DoubleType, LongType, StringType, StructField, StructType

    types = {"string": StringType(), "double": DoubleType(), "long": LongType()}
    schema = StructType([StructField(name, types[kind]) for name, kind in FIELDS])
    return df.withColumn("o", F.from_json(F.col("value").cast("string"), schema)).filter(F.col("o.amount") >= MIN_AMOUNT)


def _cents(order: str = "o") -> Column:
    from pyspark.sql import functions as F

    return F.round(F.col(f"{order}.amount") * 100).cast("long")


def _order_json(order: str = "o") -> Column:
    """The output value: the order (the struct column ``order``) and its ``amount_cents``, as compact JSON."""
    from pyspark.sql import functions as F

    return F.to_json(F.struct(*[F.col(f"{order}.{name}").alias(name) for name, _ in FIELDS],
                              _cents(order).alias("amount_cents"))).cast("binary")


#: The benchmark's order as a JSON Schema: ``json_transform``'s source format.
ORDER_JSON_SCHEMA = {"type": "object", "properties": {
    name: {"type": {"string": "string", "double": "number", "long": "integer"}[kind]} for name, kind in FIELDS}}

#: The benchmark's order as Avro (``lockstep_dev.datagen.order`` with ``note``, the padding): the formats
#: benchmark's input, registered under ``<topic>-value``.
_ORDER_FIELDS = [{"name": name, "type": kind} for name, kind in FIELDS]
ORDER_SCHEMA = {"type": "record", "name": "BenchOrder", "namespace": "dev.lockstep.bench", "fields": _ORDER_FIELDS}
#: What ``avro_transform`` returns: the order and ``amount_cents``, the sink's schema (auto-registered).
ENRICHED_SCHEMA = {"type": "record", "name": "BenchEnrichedOrder", "namespace": "dev.lockstep.bench",
                   "fields": [*_ORDER_FIELDS, {"name": "amount_cents", "type": "long"}]}


def avro_transform(df: DataFrame) -> DataFrame:
    """Parse → filter → encode with formats: the same filter and field as ``transform``, on the decoded
    ``data`` column (``source.value: avro-confluent``); Lockstep encodes the returned ``data`` in the
    sink's schema (``sink.value: avro-confluent``)."""
    from pyspark.sql import functions as F

    order = F.col("data")
    enriched = F.struct(*[order[name].alias(name) for name, _ in FIELDS],
                        F.round(order["amount"] * 100).cast("long").alias("amount_cents"))
    return df.filter(order["amount"] >= MIN_AMOUNT).withColumn("data", enriched)


def identity(df: DataFrame) -> DataFrame:
    """Every record as it came: the large-input benchmark's measure of Lockstep's own path (read, write in
    transactions, commit) apart from the transform's work."""
    return df


def transform_value(value: bytes) -> bytes | None:
    """The same transform for one record; None when the record is filtered out."""
    doc = json.loads(value)
    amount = doc.get("amount")
    if amount is None or amount < MIN_AMOUNT:
        return None
    doc["amount_cents"] = round(amount * 100)
    return json.dumps(doc, separators=(",", ":")).encode()


def window_input(df: DataFrame) -> DataFrame:
    """The windowed race's transform (``lockstep_bench.windowed``): the order's ``customer`` and
    ``created_at`` (epoch seconds) as columns, the only fields the window needs, as the peers parse
    only those; a record without them gets an ``error`` (the dead-letter topic)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    schema = StructType([StructField("customer", StringType()), StructField("created_at", LongType())])
    order = F.from_json(F.col("value").cast("string"), schema)
    missing = F.col("customer").isNull() | F.col("created_at").isNull()
    return (df.withColumn("o", order)
            .withColumn("customer", F.col("o.customer"))
            .withColumn("created_at", F.col("o.created_at"))
            .withColumn("error", F.when(missing, F.lit("not an order with customer and created_at")))
            .drop("o"))
