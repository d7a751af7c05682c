"""A state function over keyed state (``state.function``, `lockstep.state_function`): the user's function
runs per key in the Python workers (`lockstep.spark.state_worker`) over the key's new records and its
state; its outputs carry the headers it returns with them, and its new state rows come back beside them.
Its modules are imported on the driver first, so that a missing one fails before Spark does anything."""
from __future__ import annotations

__all__ = ["function_modules"]

from typing import TYPE_CHECKING

from lockstep.errors import TerminalError
from lockstep.model.state_rows import EVENT, INTERNAL, KEY
from lockstep.rules.watermarks import EventClock
from lockstep.spark.keyed_rows import HEADERS_TYPE
from lockstep.spec import PipelineSpec, StateSpec

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


def function_modules(spec: PipelineSpec) -> tuple[str, ...]:
    """The modules of a state function (and its migration), imported here so that a missing one fails
    before Spark does anything, and so that they can be shipped to the executors."""
    import importlib

    if spec.state is None or spec.state.function is None:
        return ()
    names = []
    for target in filter(None, (spec.state.function.process, spec.state.function.migrate)):
        module, _, function = target.partition(":")
        try:
            found = getattr(importlib.import_module(module), function, None)
        except ImportError as exc:
            raise TerminalError(f"{spec.path}: state.function: cannot import module {module!r}: {exc}") from exc
        if not callable(found):
            raise TerminalError(f"{spec.path}: state.function: {module} has no callable {function!r}")
        names.append(module)
    return tuple(names)


def _function(state: StateSpec, clock: EventClock, good: DataFrame, loaded: DataFrame,
              record_columns: list[str]) -> tuple[DataFrame, DataFrame]:
    """The user's function per key, over ``cogroup(new records, state).applyInPandas``; its result is kept
    (a local checkpoint) so that the output and the state written come from the same calls."""
    from pyspark.sql import functions as F

    from lockstep.spark.state_worker import (
        KIND,
        OUT_HEADERS,
        OUT_HEADERS_SCHEMA,
        OUT_KEY,
        FunctionSettings,
        apply_function,
        result_columns,
        schema_ddl,
        state_columns,
    )

    f = state.function
    assert f is not None
    seen = [c if c != EVENT else "event_time_ms" for c in (*record_columns, EVENT)]
    settings = FunctionSettings(f.process, f.fields, clock.after, tuple(seen), options=tuple(f.options.items()))
    records = good.select(*record_columns, *[c for c in INTERNAL if c not in record_columns])
    result = (records.groupBy(KEY).cogroup(loaded.groupBy(KEY))
              .applyInPandas(apply_function(settings), schema_ddl(result_columns(f.fields))))
    result = result.localCheckpoint(eager=True)
    # The headers the function gave an output row, from their JSON text back to Spark's Kafka header type.
    headers = F.transform(F.from_json(F.col(OUT_HEADERS), OUT_HEADERS_SCHEMA),
                          lambda h: F.struct(h["key"].alias("key"), F.unbase64(h["value"]).alias("value")))
    output = result.filter(F.col(KIND) == "out").select(
        "value", F.col(OUT_KEY).alias("key"), "topic", "partition", "offset", F.lit(None).cast("string").alias("error"),
        headers.cast(HEADERS_TYPE).alias("headers"))
    # Timers are a JSON list of epoch ms (an array column did not survive pandas -> Arrow in cogroup,
    # pyspark 4.0.0); `lockstep.store.state_chain.timers` counts them.
    return output, result.filter(F.col(KIND) == "state").select(*[n for n, _ in state_columns(f.fields)])
