"""A transform whose work is a plain Python function per record, made safe with ``lockstep.rows``:
an order the function raises for is dead-lettered with the exception, the others go on."""
from __future__ import annotations

import json
from typing import TYPE_CHECKING

from lockstep.rows import apply, guarded

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


@guarded(returns="binary")
def order_in_cents(value: bytes) -> bytes:
    """The order with its amount in cents; raises for anything that is not an order with a numeric amount."""
    order = json.loads(value)
    return json.dumps({**order, "amount_cents": round(float(order["amount"]) * 100)}).encode()


def enrich(df: DataFrame) -> DataFrame:
    return apply(df, order_in_cents, "value")
