"""How a stateless checkpoint counts its records that do not decode while it writes
(`lockstep.spark.codecs.Formats.undecodable_after`), in a Spark Connect session or a classic local one:
run as a script by test_formats.py, so neither session shares the test's Python process.

    python undecodable_counted.py sc://HOST:PORT | classic

Ten records, three of which do not decode, go through three transforms (all of them, the first two, a
join with an empty table) and a write each. Prints one JSON document: per transform, what the write
observed and the count `undecodable_after` returned.
"""
from __future__ import annotations

import json
import sys

from lockstep.spark import codecs
from lockstep.spec import parse_spec

SCHEMA = {"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]}
VALUES = [b'{"id": "a"}', b"{not json", b'{"id": "b"}', b'{"n": 1}', b'{"id": "c"}', b'{"id": "d"}', b"[",
          b'{"id": "e"}', b'{"id": "f"}', b'{"id": "g"}']


def main(where: str) -> None:
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    if where == "classic":
        spark = SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false").getOrCreate()
        codecs._OBSERVED_WAIT_S = 3.0  # what a write that never computed the counts waits for them
    else:
        spark = SparkSession.builder.remote(where).getOrCreate()
    spec = parse_spec({"name": "u", "source": {"topics": ["in"], "value": {"format": "json", "schema": json.dumps(SCHEMA)}},
                       "transform": "lockstep_examples.orders:passthrough",
                       "sink": {"topic": "out", "dead_letter_topic": "dlq"},
                       "checkpoints": {"store": "s3://lockstep/u"}}, "u.yaml")
    rows = [(v, None, "in", i % 2, i) for i, v in enumerate(VALUES)]
    df = spark.createDataFrame(rows, "value binary, key binary, topic string, partition int, offset bigint")
    empty = spark.createDataFrame([], "k string")
    transforms = {
        "all": lambda d: d,
        "limit": lambda d: d.limit(2),
        "empty_join": lambda d: d.join(F.broadcast(empty), F.col("data.id") == F.col("k")).drop("k"),
    }
    report = {}
    for name, transform in transforms.items():
        formats = codecs.Formats(spec)
        out, decoded = formats.transformed(df, transform, observe=True)
        out.write.format("noop").mode("overwrite").save()
        assert decoded is not None and formats._observation is not None
        report[name] = {"observed": codecs._observed(formats._observation),
                        "undecodable": formats.undecodable_after(decoded, len(VALUES))}
    print(json.dumps(report))


if __name__ == "__main__":
    main(sys.argv[1])
