"""The spec's record formats as Spark expressions: decode the source's keys and values before the
transform, encode the transform's output after it (docs/formats.md).

Every record is parsed once, in the JVM: Avro by Spark's ``from_avro``/``to_avro`` (spark-avro), JSON
by ``from_json``/``to_json`` or ``try_parse_json`` (a VARIANT, when no schema is declared), Protobuf by
Lockstep's own Java UDFs (``ProtobufDecode``/``ProtobufEncode`` in its jar, over protobuf-java: Spark's
spark-protobuf cannot be installed here), registered in the run's session by `register_protobuf`. The
registry's framing is read with column functions: the magic byte, the schema id, then the payload,
decoded with its own writer schema (one ``from_avro`` per version of the subject, chosen by the id)
into the reader schema, so a topic whose records carry several schema versions decodes all of them
into one shape.

A record that does not decode (a bad magic byte, an id that is no version of the subject, bytes its
writer schema cannot read) never reaches the transform: it goes to the dead-letter topic as it came,
with the reason (`lockstep.formats.wire`), in the checkpoint's transactions. Because the transform
may drop rows, those dead letters are kept apart from its input and put back beside its output
(`with_dead_letters`), in the transaction of their source partition's task (`lockstep.spark.placement`).

Whether there are any is known before the write (a look at the input: a read and a decode), or, in
connect mode, from the write itself: the write's own pass counts the records it read and those that did
not decode (an observation, `watch`), and only when some did not is the output written again with them
(`counted_undecodable` says when that count can be trusted). Most checkpoints then read and decode their
input once.
"""
from __future__ import annotations

__all__ = [
    "DATA_COLUMN", "DECODE_ERROR", "RAW", "Formats", "as_read", "carries_raw", "counted_undecodable", "decodable",
    "decoded_columns", "decode", "rejoined", "sink_reading", "watch", "with_error", "with_raw",
]

import uuid
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from lockstep.errors import TerminalError
from lockstep.formats import wire
from lockstep.formats.names import AVRO_FORMATS
from lockstep.formats.resolution import Reading, Writing, readings, writings
from lockstep.model.output_contract import ACCEPTED_TYPES, ROUTE_COLUMN
from lockstep.spec import PipelineSpec
from lockstep.transform import is_connect_session

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

#: The column the transform receives each decoded part in, and returns the part to encode in.
DATA_COLUMN = {"value": "data", "key": "key_data"}
#: Why a record did not decode (internal: the input's dead letters are split off by it).
DECODE_ERROR = "__ls_decode_error"
#: What the write's own pass counts on the decoded input (`watch`): the records, and those that did not decode.
SEEN, UNDECODABLE = "records", "undecodable"
#: The input's key, value and headers as they came, beside the read's columns through the transform: what a dead
#: letter carries, whatever the transform did to ``key``, ``value`` and ``headers`` (`with_raw`, `as_read`).
RAW = {"key": "__ls_raw_key", "value": "__ls_raw_value", "headers": "__ls_raw_headers"}
_PLAN_CACHE = "spark.connect.session.planCache.enabled"
_PERMISSIVE = {"mode": "PERMISSIVE"}


# ---- one run's formats ------------------------------------------------------------------------------------
class Formats:
    """The spec's record formats for one run (`lockstep.formats.codecs`), resolved once on the driver: the
    source's schemas by id, the sink's schema and its id."""

    def __init__(self, spec: PipelineSpec, pinned: Mapping[str, int] | None = None,
                 read: Collection[str] | None = None) -> None:
        """``pinned``: the claim's schema ids (`CheckpointClaim.schema_ids`); None (an audit): the
        registry's latest versions and the declared schemas. ``read``: the source topics whose records the
        run decodes (`readings`: only their subjects must exist); None: every source topic."""
        self.spec = spec
        self.readings = readings(spec, pinned, read)
        self.writings = writings(spec, pinned=pinned)

    def transformed(self, df: DataFrame, transform: Callable[[DataFrame], DataFrame],
                    enrich: Callable[[DataFrame], DataFrame] | None = None,
                    enrich_errors: bool = False, observation: Any = None,
                    raised: Mapping[tuple[str, int, int], str] | None = None) -> tuple[DataFrame, DataFrame | None]:
        """The transform's output over the records that decode, and the decoded input (None: nothing is
        decoded), whose records that did not decode `with_dead_letters` writes.

        ``enrich`` (the tables' joins, `lockstep.tables.materialize.join_tables`) runs between the decode and the
        transform, over every record with its `DECODE_ERROR`: it may add columns, drop records without an
        error, or (``enrich_errors``) set the error of a record that must go to the dead-letter topic as it
        came. Without ``enrich_errors`` the returned input is the one before ``enrich``: its dead letters are
        the same, and counting them (`undecodable_count`) does not run the joins again.

        ``observation`` (`watch`): the transform's input is counted on its way, every record and those that
        must go to the dead-letter topic, by the action that writes the output.

        ``raised`` (`lockstep.spark.raised`): records set aside as if they did not decode, with their reason: a
        Spark data error that the transform or a route's condition raised for them."""
        from pyspark.sql import functions as F

        if not self.readings and enrich is None and not raised:
            return self._as_read(self._encoded(transform(df))), None
        if self.readings:
            decoded = decode(df, self.readings)
        else:
            decoded = df.withColumn(DECODE_ERROR, F.lit(None).cast("string"))
        if raised:
            at = F.concat_ws("\0", F.col("topic"), F.col("partition").cast("string"), F.col("offset").cast("string"))
            why = F.create_map(*[x for (t, p, o), text in sorted(raised.items())
                                 for x in (F.lit(f"{t}\0{p}\0{o}"), F.lit(text))])
            decoded = decoded.withColumn(DECODE_ERROR, F.coalesce(F.col(DECODE_ERROR), F.try_element_at(why, at)))
        # The records are counted where the dead letters are known, and before a join that may drop some.
        # The frames returned carry no observation: a write again of the output beside them names it once.
        observed = _observed(decoded, observation) if observation is not None and not enrich_errors else decoded
        enriched = enrich(observed) if enrich is not None else observed
        if observation is not None and enrich_errors:
            errors, enriched = enriched, _observed(enriched, observation)
            return self._as_read(self._encoded(transform(decodable(enriched)))), errors
        return self._as_read(self._encoded(transform(decodable(enriched)))), (enriched if enrich_errors else decoded)

    def _as_read(self, out: DataFrame) -> DataFrame:
        """A stateless output's dead letters with their input's bytes (`as_read`); a stateful one as it is."""
        return as_read(out) if self.spec.state is None else out

    def _encoded(self, out: DataFrame) -> DataFrame:
        state = self.spec.state
        # A window's outputs are its aggregates, which the window encoder writes; a state function's are its
        # own: only a stateless transform's records, and the records dedup passes, are the transform's `data`.
        # A stateful operator's key and event time may read `data` (`data.customer`): it stays until they
        # are computed (`lockstep.spark.keyed_state.keyed`), and is never kept in the state.
        if self.writings and (state is None or state.dedup is not None):
            return encode(out, self.writings, self.spec.transform, keep=state is not None)
        if state is not None or not self.readings:
            return out
        # the decoded parts are the input's: a transform that kept them writes its value, not them
        return out.drop(*[DATA_COLUMN[r.part] for r in self.readings])

    def window_encoder(self) -> Callable[[Column], Column] | None:
        return window_encoder(self.writings)

    def table_record(self) -> Callable[[Column], Column] | None:
        """How an Iceberg table beside ``sink.topic`` reads a written value back as the record a consumer decodes:
        with the sink value's Avro schema (the registry subject's version the claim pins, or the declared one), the
        bytes written decoded into a struct of the schema's fields (Spark's Avro types), which become the table's
        columns in place of ``value``. None: the value is not Avro with a schema (the table keeps ``value``)."""
        w = next((w for w in self.writings if w.part == "value" and w.topic is None), None)
        if w is None or w.format.format not in AVRO_FORMATS or not w.schema:
            return None
        schema, framed = w.schema, w.schema_id is not None

        def record(value: Column) -> Column:
            from pyspark.sql import functions as F
            from pyspark.sql.avro.functions import from_avro

            payload = F.substring(value, wire.HEADER_BYTES + 1, 2**31 - 1) if framed else value
            return from_avro(payload, schema)
        return record

    @staticmethod
    def with_dead_letters(output: DataFrame, decoded: DataFrame | None, columns: tuple[str, ...] | list[str]) -> DataFrame:
        """``output`` and the input's records that did not decode, as dead letters, in ``columns`` and an
        ``error`` column (null for the output's records when it has none: without it the writers would send
        a dead letter to the sink)."""
        if decoded is None:
            return output
        from pyspark.sql import functions as F

        columns = with_error(columns)
        if "error" not in output.columns:
            output = output.withColumn("error", F.lit(None).cast("string"))
        return output.select(*columns).unionByName(undecodable(decoded, columns))

    @staticmethod
    def undecodable_count(decoded: DataFrame) -> int:
        """How many of the input's records do not decode (a Spark job: a read and a decode, no shuffle)."""
        from pyspark.sql import functions as F

        return decoded.filter(F.col(DECODE_ERROR).isNotNull()).count()

    def describe(self) -> str:
        return describe(self.readings, self.writings)


# ---- counting the dead letters in the write's own pass -----------------------------------------------------
def watch(spark: object) -> Any:
    """An observation that counts, in the action that writes the output, the records the transform's input
    saw and those that did not decode (`Formats.transformed`); None in a classic session, where reading an
    observation whose plan the optimizer pruned (a transform that keeps no row) waits for ever: the run
    counts them before the write instead."""
    if not is_connect_session(spark):
        return None
    from pyspark.sql.connect.observation import Observation

    try:
        # The server keeps each relation it analyzed (`out.schema`, a transform's `df.columns`) and takes
        # the kept plan when that relation comes again in the write: an observation in it is then not
        # registered for the write, which reports no metrics (measured, Spark 4.0). The run's session is
        # its own (one per attempt): it keeps none.
        spark.conf.set(_PLAN_CACHE, "false")  # type: ignore[attr-defined]
    except Exception:  # noqa: BLE001 - a server that does not let a session set it: count apart, as classic does
        return None
    return Observation(f"lockstep-input-{uuid.uuid4().hex}")


def _observed(df: DataFrame, observation: Any) -> DataFrame:
    from pyspark.sql import functions as F

    return df.observe(observation, F.count(F.lit(1)).alias(SEEN), F.count(F.col(DECODE_ERROR)).alias(UNDECODABLE))


def counted_undecodable(metrics: Mapping[str, object], records: int) -> int | None:
    """How many of the input's ``records`` did not decode, by the write's own count (`watch`'s metrics); None
    when that pass did not see each record exactly once, so its count says nothing: no metrics (the plan
    kept none of the input: the optimizer pruned it), fewer records (a transform that stops reading, as a
    limit does; a source whose offsets hold transaction markers), more (a stage Spark ran again)."""
    seen, bad = metrics.get(SEEN), metrics.get(UNDECODABLE)
    if not isinstance(seen, int) or not isinstance(bad, int) or seen != records or not 0 <= bad <= seen:
        return None
    return bad


# ---- dead letters as their input came ----------------------------------------------------------------------
def with_raw(df: DataFrame) -> DataFrame:
    """The read's records with their key, value and headers kept as they came in the `RAW` columns, for the
    transform to carry through (a projection of them costs nothing: Spark reads the same bytes). The read's
    ``headers`` (a read with them) become `RAW` only: the transform sees no ``headers`` of the input, as before."""
    from pyspark.sql import functions as F

    headers = F.col("headers") if "headers" in df.columns else F.lit(None)
    return (df.withColumn(RAW["key"], F.col("key")).withColumn(RAW["value"], F.col("value"))
            .withColumn(RAW["headers"], headers.cast(ACCEPTED_TYPES["headers"][0])).drop("headers"))


def carries_raw(out: DataFrame) -> bool:
    """Whether the transform kept the `RAW` columns (``SELECT *``, ``withColumn``): its dead letters then have
    their input's bytes (`as_read`); else they are rejoined to their input after the write (`rejoined`)."""
    return all(c in out.columns for c in RAW.values())


def as_read(out: DataFrame) -> DataFrame:
    """``out`` with every dead letter's (``error`` set) key, value and headers its input's as they came, whatever the
    transform (or the sink's encoder) put there. Unchanged when the transform dropped
    them (the caller rejoins, `rejoined`) or returns an output the writer refuses anyway (it says why)."""
    from pyspark.sql import functions as F

    if not carries_raw(out):
        return out
    fields = {f.name: f.dataType.simpleString() for f in out.schema.fields}
    if "error" not in fields or fields.get("value") not in ACCEPTED_TYPES["value"] or \
            fields.get("key", "binary") not in ACCEPTED_TYPES["key"] or \
            fields.get("headers", ACCEPTED_TYPES["headers"][0]) not in ACCEPTED_TYPES["headers"]:
        return out
    dead = F.col("error").isNotNull()
    for part in ("value", "key", "headers"):
        kind = ACCEPTED_TYPES[part][0]
        kept = F.col(part).cast(kind) if part in fields else F.lit(None).cast(kind)
        out = out.withColumn(part, F.when(dead, F.col(RAW[part])).otherwise(kept))
    return out  # the RAW columns stay (the writer reads its own columns): they say the dead letters are as read


def rejoined(out: DataFrame, source: DataFrame) -> DataFrame:
    """``out`` with every dead letter's key, value and headers taken from its input record in ``source`` (the
    read, `with_raw`), found by its provenance (``topic``, ``partition``, ``offset``): for a transform that dropped
    the `RAW` columns (an SQL query that lists its columns). A Spark join: run only when a checkpoint has dead
    letters (`lockstep.spark.job`). A dead letter whose provenance names no input record keeps what it had."""
    from pyspark.sql import functions as F

    out = out.drop(*[c for c in RAW.values() if c in out.columns])
    for part in ("key", "headers"):
        if part not in out.columns:
            out = out.withColumn(part, F.lit(None).cast(ACCEPTED_TYPES[part][0]))
    at = {c: f"__ls_at_{c}" for c in ("topic", "partition", "offset")}
    raw = source.select(F.col("topic").alias(at["topic"]), F.col("partition").cast("int").alias(at["partition"]),
                        F.col("offset").cast("bigint").alias(at["offset"]), *[F.col(c) for c in RAW.values()])
    dead = out.filter(F.col("error").isNotNull())
    found = dead.join(raw, (F.col("topic") == F.col(at["topic"])) & (F.col("partition").cast("int") == F.col(at["partition"]))
                      & (F.col("offset").cast("bigint") == F.col(at["offset"])), "left")
    matched = F.col(at["offset"]).isNotNull()
    for part in ("value", "key", "headers"):
        kind = ACCEPTED_TYPES[part][0]
        found = found.withColumn(part, F.when(matched, F.col(RAW[part])).otherwise(F.col(part).cast(kind)))
    fixed = found.select(*out.columns)
    good = out.filter(F.col("error").isNull())
    return good.select(*[F.col(c).cast(ACCEPTED_TYPES[c][0]) if c in ("value", "key") else F.col(c)
                         for c in out.columns]).unionByName(fixed)


def with_error(columns: Sequence[str]) -> tuple[str, ...]:
    """The writer's ``columns`` with ``error``, which says that a record is a dead letter."""
    return tuple(columns) if "error" in columns else (*columns, "error")


def decoded_columns(spec: PipelineSpec) -> tuple[str, ...]:
    """The columns in which the transform receives the source's decoded parts."""
    return tuple(DATA_COLUMN[part] for part, fmt in (("value", spec.source.value), ("key", spec.source.key))
                 if fmt.decoded)


def sink_reading(spec: PipelineSpec) -> Reading | None:
    """How to read back the sink's values in its format (an audit's), every version of the sink's subject
    by id; None when they are JSON (or bytes, or strings) already."""
    from lockstep.formats.registry import registry_for

    fmt = spec.sink.value
    if fmt.format == "avro":
        return Reading("value", fmt, fmt.schema)
    if not fmt.registry:
        return None
    topic = spec.sink.topic
    assert topic is not None  # a sink format needs sink.topic: the spec refuses one without
    subject = fmt.subject_for(topic, "value")
    versions = registry_for(spec.sink.registry_conn_id).subject_schemas(subject)
    return Reading("value", fmt, fmt.schema or versions[-1].text, {v.id: v.text for v in versions},
                   {topic: subject}, {topic: tuple(sorted(v.id for v in versions))})


# ---- decoding ---------------------------------------------------------------------------------------------
def decode(df: DataFrame, readings: Sequence[Reading]) -> DataFrame:
    """``df`` (the read's columns) with each decoded part in its `DATA_COLUMN` and `DECODE_ERROR` set for a
    record that did not decode.

    Each record is decoded once. The decoded column is nondeterministic to Spark's optimizer (it is
    guarded by ``spark_partition_id() >= 0``, which always holds): the optimizer then neither merges its
    projection into the ones that read it nor pushes a filter on the error below it, either of which
    would copy the decoding expression into every reference (each required field's check, the error,
    the filter), since conditional branches are not shared by its subexpression elimination."""
    from pyspark.sql import functions as F

    register_protobuf(df.sparkSession, readings, ())
    register_json(df.sparkSession, readings)
    errors = []
    seen = []
    for reading in readings:
        data, error_of, seen_of = _decoder(reading)
        column = DATA_COLUMN[reading.part]
        df = df.withColumn(column, F.when(F.spark_partition_id() >= F.lit(0), data))
        errors.append(error_of(F.col(column)))
        if seen_of is not None:
            seen.append((column, seen_of(F.col(column))))
    df = df.withColumn(DECODE_ERROR, F.coalesce(*errors) if errors else F.lit(None).cast("string"))
    for column, value in seen:
        df = df.withColumn(column, value)
    return df


def decodable(decoded: DataFrame) -> DataFrame:
    """The records the transform receives: those that decoded."""
    from pyspark.sql import functions as F

    return decoded.filter(F.col(DECODE_ERROR).isNull()).drop(DECODE_ERROR)


def undecodable(decoded: DataFrame, columns: Sequence[str]) -> DataFrame:
    """The records that did not decode, as dead letters in the writer's ``columns``: their own key, value and
    headers (the read's, `RAW`, when it read them), the reason as their error."""
    from pyspark.sql import functions as F

    bad = decoded.filter(F.col(DECODE_ERROR).isNotNull())
    made = {"value": F.col("value"), "key": F.col("key"), "topic": F.col("topic"),
            "partition": F.col("partition").cast("int"), "offset": F.col("offset").cast("bigint"),
            "headers": (F.col(RAW["headers"]) if RAW["headers"] in decoded.columns
                        else F.lit(None).cast(ACCEPTED_TYPES["headers"][0])), "error": F.col(DECODE_ERROR),
            ROUTE_COLUMN: F.lit(None).cast("string")}
    return bad.select(*[made[c].alias(c) for c in columns])


Decoder = tuple["Column", Callable[["Column"], "Column"], Callable[["Column"], "Column"] | None]


def _decoder(r: Reading) -> Decoder:
    """(the decoded column, its error as a function of it, and what of it the transform sees: None, all of
    it) of one part."""
    from pyspark.sql import functions as F

    raw = F.col(r.part)
    kind = r.format.format
    present = raw.isNotNull()
    if kind == "string":
        return raw.cast("string"), lambda d: F.lit(None).cast("string"), None
    if kind == "json" and r.reader is None:
        return F.try_parse_json(raw.cast("string")), lambda d: F.when(present & d.isNull(),
                                                                     F.lit(wire.NOT_JSON.format(part=r.part))), None
    if kind == "json":
        required = wire.json_required_fields(r.reader or "{}")
        text = wire.DOES_NOT_MATCH.format(part=r.part, where=r.format.schema_from,
                                          why="required field {field} is missing or null, or it is not JSON")
        return _json_data(r, raw), lambda d: _missing(d, required, present, text), None
    if kind == "protobuf":  # the decoder's result is (data, error), decoded once; the transform sees its data
        protobuf_text = wire.DOES_NOT_MATCH.format(part=r.part, where=r.format.schema_from, why="\0")
        return (_protobuf_decode(r, raw, F.lit(None).cast("string")),
                lambda d: F.when(present & d.getField("error").isNotNull(), _filled(protobuf_text, d.getField("error"))),
                lambda d: d.getField("data"))
    if kind == "avro":
        required = wire.avro_required_fields(r.reader or "")
        text = wire.DOES_NOT_MATCH.format(part=r.part, where=r.format.schema_from,
                                          why="it does not decode as Avro (required field {field} is null)")
        return _from_avro(raw, r.reader or "", None), lambda d: _missing(d, required, present, text), None
    return _registry_decoder(r, raw, present)


def _registry_decoder(r: Reading, raw: Column, present: Column) -> Decoder:
    from pyspark.sql import functions as F

    framed = (F.length(raw) >= F.lit(wire.HEADER_BYTES)) & (F.substring(raw, 1, 1) == F.lit(bytes([wire.MAGIC_BYTE])))
    # Each record's id is compared as its 4 bytes with each known id's: a number is made of them only for the
    # error of a record whose id is unknown or that does not decode. (Parsing it for every record, through
    # hex and conv, took a tenth of a 10M-record Avro checkpoint's CPU: measured with JFR, docs/formats.md.)
    id_bytes = F.substring(raw, 2, 4)
    schema_id = F.conv(F.hex(id_bytes), 16, 10).cast("long")

    def is_id(value: int) -> Column:
        return id_bytes == F.lit(wire.header(value)[1:])

    payload = F.expr(f"substring(`{r.part}`, {wire.HEADER_BYTES + 1})")
    ids = sorted(r.writers)
    if len(set(r.subjects.values())) == 1:
        known = id_bytes.isin([F.lit(wire.header(i)[1:]) for i in ids]) if ids else F.lit(False)
    else:  # each topic's records carry versions of its own subject
        by_topic = F.create_map(*[x for topic in sorted(r.subjects) for x in (
            F.lit(topic), F.array(*[F.lit(wire.header(i)[1:]) for i in r.ids[topic]]).cast("array<binary>"))])
        known = F.coalesce(F.array_contains(F.try_element_at(by_topic, F.col("topic")), id_bytes), F.lit(False))
    subject = (F.lit(next(iter(r.subjects.values()))) if len(set(r.subjects.values())) == 1
               else F.try_element_at(F.create_map(*[x for t, s in sorted(r.subjects.items()) for x in (F.lit(t), F.lit(s))]),
                                     F.col("topic")))
    protobuf = r.format.format == "protobuf-confluent"
    data: Column | None = None
    if protobuf:  # any version's message reads with the reader's descriptor
        expected = None
        for schema_id_value in ids:  # the message's indexes in each writer schema
            path = F.lit(_writer_indexes(r.writers[schema_id_value], r.message or ""))
            expected = (F.when(is_id(schema_id_value), path) if expected is None
                        else expected.when(is_id(schema_id_value), path))
        data = _protobuf_decode(r, payload, expected if expected is not None else F.lit("!")) if ids else None
        reader_required: tuple[str, ...] = ()
        why = ""
    elif r.format.format == "avro-confluent":
        for schema_id_value in ids:  # each record with its own writer schema, into the reader schema
            decoded = _from_avro(payload, r.writers[schema_id_value], r.reader)
            data = (F.when(is_id(schema_id_value), decoded) if data is None
                    else data.when(is_id(schema_id_value), decoded))
        reader_required = wire.avro_required_fields(r.reader or "")
        why = "its payload does not decode (required field {field} is null)"
    else:  # json-confluent: any version's JSON reads into the reader schema by name
        data = _json_data(r, payload)
        reader_required = wire.json_required_fields(r.reader or "{}")
        why = "required field {field} is missing or null, or it is not JSON"
    if data is None:  # a subject without versions: nothing decodes
        data = F.lit(None)
    data = F.when(present & framed & known, data)
    unknown = F.format_string(wire.UNKNOWN_ID.replace("{part}", r.part).replace("{id}", "%d").replace("{subject}", "%s"),
                              schema_id, subject)
    template = wire.UNDECODABLE.replace("{part}", r.part).replace("{id}", "%d").replace("{why}", why.replace("%", "%%"))
    protobuf_template = wire.UNDECODABLE.replace("{part}", r.part).replace("{id}", "%d").replace("{why}", "%s")

    def error_of(d: Column) -> Column:
        undecoded = (F.when(d.getField("error").isNotNull(), F.format_string(protobuf_template, schema_id,
                                                                             d.getField("error")))
                     if protobuf else _missing(d, reader_required, F.lit(True), template, schema_id))
        return (F.when(present & ~framed, F.lit(wire.BAD_MAGIC.format(part=r.part)))
                .when(present & ~known, unknown)
                .when(present, undecoded))
    if protobuf:  # the decoder's result is (data, error), decoded once; the transform sees its data
        return data, error_of, lambda d: d.getField("data")
    return data, error_of, None


def _missing(data: Column, required: Sequence[str], present: Column, template: str, *args: Column) -> Column:
    """The error of a decoded record whose required field is null (or None): ``template`` with ``{field}``."""
    from pyspark.sql import functions as F

    error = None
    for name in required:
        text = template.replace("{field}", name)
        message = F.format_string(text, *args) if args else F.lit(text)
        cond = present & data.getField(name).isNull()
        error = F.when(cond, message) if error is None else error.when(cond, message)
    nothing = present & data.isNull()
    text = template.replace("{field}", "(all)")
    whole = F.format_string(text, *args) if args else F.lit(text)
    return F.when(nothing, whole) if error is None else F.when(nothing, whole).otherwise(error)


def _from_avro(payload: Column, writer: str, reader: str | None) -> Column:
    from pyspark.sql.avro.functions import from_avro

    options = dict(_PERMISSIVE)
    if reader is not None and reader != writer:
        options["avroSchema"] = reader
    return from_avro(payload, writer, options)


def _json_ddl(r: Reading) -> str:
    try:
        return wire.json_schema_ddl(r.reader or "{}")
    except wire.UnsupportedSchema as exc:
        raise TerminalError(f"source.{r.part}: its JSON Schema ({r.format.schema_from or 'the registry'}) has no "
                            f"Spark type: {exc}") from None


# ---- JSON's decoder in the JVM ------------------------------------------------------------------------------
_JSON_DECODE_CLASS = "dev.lockstep.formats.JsonDecode"


def _json_name(fields: str) -> str:
    """The session's name of the JSON decoder of one flat schema (`lockstep.formats.wire.json_flat_fields`): one
    per schema, as its Spark type is the schema's."""
    import hashlib

    return f"lockstep_json_decode_{hashlib.sha256(fields.encode()).hexdigest()[:16]}"


def _json_data(r: Reading, raw: Column) -> Column:
    """The JSON record in ``raw`` (bytes) decoded into the reader schema: by Lockstep's decoder when it answers
    (a flat schema, a plain record), else by Spark's ``from_json``."""
    from pyspark.sql import functions as F

    parsed = F.from_json(raw.cast("string"), _json_ddl(r), _PERMISSIVE)
    fields = wire.json_flat_fields(r.reader or "{}")
    if fields is None:
        return parsed
    return F.coalesce(F.call_function(_json_name(fields), raw, F.lit(fields)), parsed)


def register_json(session: object, readings: Sequence[Reading]) -> None:
    """Register the JVM JSON decoder (``JsonDecode`` in Lockstep's jar) for each ``json`` reading with a flat schema,
    typed as `_json_ddl` types its records. It decodes a record's bytes with Jackson's byte parser and answers only
    for plain records (ASCII, one object, each field of its exact kind), so what it answers is what ``from_json``
    answers; Spark's ``from_json`` decodes every other record (docs/formats.md, *Cost*)."""
    for r in readings:
        if r.format.format not in ("json", "json-confluent") or r.reader is None:
            continue
        fields = wire.json_flat_fields(r.reader)
        if fields is not None:
            session.udf.registerJavaFunction(_json_name(fields), _JSON_DECODE_CLASS, _json_ddl(r))  # type: ignore[attr-defined]


# ---- Protobuf ---------------------------------------------------------------------------------------------
_DECODE_CLASS = "dev.lockstep.formats.ProtobufDecode"
_ENCODE_CLASS = "dev.lockstep.formats.ProtobufEncode"


def _protobuf_name(verb: str, schema: str | None, message: str | None) -> str:
    """The session's name of the UDF that decodes (or encodes) ``message``: one per schema and message, as
    its Spark type is theirs."""
    from lockstep.formats import protobuf

    return f"lockstep_protobuf_{verb}_{protobuf.codec_key(schema or '', message or ''):016x}"


def register_protobuf(session: object, readings: Sequence[Reading], writings: Sequence[Writing]) -> None:
    """Register the Protobuf formats' Java UDFs in ``session`` (classic or Spark Connect: both serve
    ``registerJavaFunction``) with their Spark types, derived from the descriptor by
    `lockstep.formats.protobuf.message_ddl` as the JVM's codec builds them."""
    from lockstep.formats import protobuf

    for verb, part, fmt, schema, message in (
            [("decode", r.part, r.format, r.reader, r.message) for r in readings]
            + [("encode", w.part, w.format, w.schema, w.message) for w in writings]):
        if not fmt.protobuf or schema is None:
            continue
        side = "source" if verb == "decode" else "sink"
        try:
            ddl = protobuf.message_ddl(protobuf.load(schema), message or "")
        except (protobuf.UnsupportedProtobuf, KeyError) as exc:
            raise TerminalError(f"{side}.{part}: message {message} of its Protobuf schema "
                                f"({fmt.schema_from or 'the registry'}) has no Spark type: {exc}") from None
        returned = f"struct<data:{ddl},error:string>" if verb == "decode" else "struct<payload:binary,error:string>"
        session.udf.registerJavaFunction(  # type: ignore[attr-defined]
            _protobuf_name(verb, schema, message), _DECODE_CLASS if verb == "decode" else _ENCODE_CLASS, returned)


def _protobuf_decode(r: Reading, payload: Column, indexes: Column) -> Column:
    """The decoder's struct<data, error> of ``payload`` (``indexes``: null for a plain payload; else the message's
    expected indexes after the registry's header, `_writer_indexes`)."""
    import base64

    from pyspark.sql import functions as F

    from lockstep.formats import protobuf

    schema = r.reader or ""
    return F.call_function(_protobuf_name("decode", schema, r.message), payload,
                           F.lit(protobuf.codec_key(schema, r.message or "")).cast("bigint"),
                           F.lit(base64.b64decode(schema)), F.lit(r.message), indexes)


def _writer_indexes(writer: str, message: str) -> str:
    """The message's indexes in a writer schema (as the registry holds it), dot-separated, as the JVM's decoder
    expects them after a record's header; ``!`` and the reason when that schema cannot name the message."""
    from lockstep.formats import protobuf

    try:
        fds, _ = protobuf.from_registry(writer)
    except protobuf.UnsupportedProtobuf as exc:
        return f"!its writer schema cannot be read: {exc}"
    path = protobuf.index_path(fds, message)
    if path is None:
        return f"!its writer schema has no message {message}"
    return ".".join(str(i) for i in path)


def _filled(template: str, why: Column) -> Column:
    """``template`` with its one ``\0`` replaced by the column ``why``."""
    from pyspark.sql import functions as F

    before, after = template.split("\0")
    return F.concat(F.lit(before), why, F.lit(after))


# ---- encoding ---------------------------------------------------------------------------------------------
def encode(out: DataFrame, writings: Sequence[Writing], transform: str, keep: bool = False) -> DataFrame:
    """The transform's output with each encoded part's `DATA_COLUMN` encoded into ``value`` (or ``key``),
    and dropped unless ``keep``.

    A dead letter (``error`` set) keeps the value it has (the input's); an output the sink's schema cannot
    hold (a required field null) becomes one, with the reason (`lockstep.formats.wire.DOES_NOT_FIT`)."""
    from pyspark.sql import functions as F

    register_protobuf(out.sparkSession, (), writings)
    for part in dict.fromkeys(w.part for w in writings):
        mine = [w for w in writings if w.part == part]
        w = next(w for w in mine if w.topic is None)
        column = DATA_COLUMN[w.part]
        if column not in out.columns:
            raise TerminalError(f"transform {transform} returned no `{column}` column, but sink.{w.part} is "
                                f"{w.format.format}: return the record to write as `{column}` (a struct of the "
                                "sink schema's fields), and Lockstep encodes it")
        if "error" not in out.columns:
            out = out.withColumn("error", F.lit(None).cast("string"))
        encoded, misfit = encoder(w, column)(F.col(column))
        for routed in (r for r in mine if r.topic is not None):  # a route's topic, with its own subject's schema
            to_route = F.col(ROUTE_COLUMN) == F.lit(routed.topic)
            routed_encoded, routed_misfit = encoder(routed, column)(F.col(column))
            encoded = F.when(to_route, routed_encoded).otherwise(encoded)
            misfit = F.when(to_route, routed_misfit).otherwise(misfit)
        ok = F.col("error").isNull()
        kept = F.col(w.part) if w.part in out.columns else F.lit(None).cast("binary")
        out = (out.withColumn("error", F.when(ok, misfit).otherwise(F.col("error")))
                  .withColumn(w.part, F.when(F.col("error").isNull(), encoded).otherwise(kept.cast("binary"))))
        if not keep:
            out = out.drop(column)
    return out


def encoder(w: Writing, column: str = "data") -> Callable[[Column], tuple[Column, Column]]:
    """A function from the record's column to (its encoded bytes, why it does not fit or null): what the
    sink's records are made of, for the transform's output and a fired window's alike."""
    from pyspark.sql import functions as F

    kind = w.format.format
    header = F.lit(wire.header(w.schema_id)) if w.schema_id is not None else None
    schema = w.schema or ""

    def misfit_of(data: Column, required: Sequence[str]) -> Column:
        error = F.lit(None).cast("string")
        for name in reversed(required):
            error = F.when(data.getField(name).isNull(), F.lit(wire.DOES_NOT_FIT.format(
                column=f"`{column}`", where=w.where, why=f"required field {name} is null"))).otherwise(error)
        return F.when(data.isNull(), F.lit(wire.DOES_NOT_FIT.format(column=f"`{column}`", where=w.where,
                                                                    why="it is null"))).otherwise(error)

    def encode_one(data: Column) -> tuple[Column, Column]:
        import base64

        from pyspark.sql.avro.functions import to_avro

        from lockstep.formats import protobuf

        if kind == "string":
            return data.cast("string").cast("binary"), F.lit(None).cast("string")
        if kind in ("json", "json-confluent"):
            text = F.to_json(data).cast("binary")
            misfit = misfit_of(data, wire.json_required_fields(schema)) if w.schema else F.lit(None).cast("string")
            return (F.concat(header, text) if header is not None else text), misfit
        if w.format.protobuf:
            result = F.call_function(_protobuf_name("encode", w.schema, w.message), data,
                                     F.lit(protobuf.codec_key(schema, w.message or "")).cast("bigint"),
                                     F.lit(base64.b64decode(schema)), F.lit(w.message))
            misfit = F.when(result.getField("error").isNotNull(), _filled(wire.DOES_NOT_FIT.format(
                column=f"`{column}`", where=w.where, why="\0"), result.getField("error")))
            body = result.getField("payload")
            if header is not None:  # then the message's indexes in the registered file
                indexes = protobuf.encode_indexes(protobuf.index_path(protobuf.load(schema), w.message or "") or (0,))
                return F.concat(header, F.lit(indexes), body), misfit
            return body, misfit
        misfit = misfit_of(data, wire.avro_required_fields(schema))
        body = F.when(misfit.isNull(), to_avro(data, schema))
        return (F.concat(header, body) if header is not None else body), misfit

    return encode_one


def window_encoder(writings: Sequence[Writing]) -> Callable[[Column], Column] | None:
    """How a fired window's record (a struct of the key, the bounds, the aggregates) becomes its value in
    the sink's value format; None: JSON, as before formats existed."""
    chosen = [w for w in writings if w.part == "value"]
    if not chosen:
        return None
    encode_one = encoder(chosen[0], "window")

    def value(record: Column) -> Column:
        return encode_one(record)[0]
    return value


def describe(readings: Sequence[Reading], writings: Sequence[Writing]) -> str:
    """One line for the run's log: what is decoded and encoded with what."""
    parts = [f"source.{r.part} {r.format.format}" + (f" ({len(r.writers)} writer schemas of "
                                                     f"{', '.join(sorted(set(r.subjects.values())))})"
                                                     if r.writers else "") for r in readings]
    parts += [f"sink.{w.part} {w.format.format} ({w.where})" for w in writings]
    return "; ".join(parts) if parts else "raw bytes"

