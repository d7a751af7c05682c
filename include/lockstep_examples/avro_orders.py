"""Orders with a schema: the transform receives each decoded record as the struct column ``data`` (and
still the raw bytes in ``value``) and returns the record to write as ``data``, which Lockstep encodes in
the sink's format (docs/formats.md). Records that do not decode never reach it: Lockstep dead-letters
them with the reason.

Schemas: ``schemas/order.avsc`` in, ``schemas/enriched_order.avsc`` out.
"""
from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

CURRENCIES = ["EUR", "USD", "GBP"]


def enrich(df: DataFrame) -> DataFrame:
    """``EnrichedOrder`` from ``Order``: the amount in cents and a priority flag; a negative amount or an
    unknown currency goes to the dead-letter topic (as the record came, with the reason)."""
    order = F.col("data")
    error = (F.when(order["amount"] < 0, F.lit("negative amount"))
             .when(~order["currency"].isin(CURRENCIES), F.concat(F.lit("unknown currency "), order["currency"])))
    enriched = F.struct(order["order_id"].alias("order_id"), order["customer"].alias("customer"),
                        order["amount"].alias("amount"), order["currency"].alias("currency"),
                        F.round(order["amount"] * 100).cast("long").alias("amount_cents"),
                        (order["amount"] >= 100).alias("priority"))
    return (df.withColumn("error", error).withColumn("data", enriched)
            .withColumn("key", order["order_id"].cast("binary")))


def big_orders(df: DataFrame) -> DataFrame:
    """Parse, filter, encode: only orders of 100 or more, unchanged (the Avro benchmark's transform)."""
    return df.filter(F.col("data.amount") >= 100)


def flatten(df: DataFrame) -> DataFrame:
    """The order's fields as columns, for a stateful pipeline (the windows aggregate them)."""
    return df.select("*", "data.customer", "data.amount", "data.created_at")
