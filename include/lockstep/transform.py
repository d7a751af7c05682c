"""The user's transform: import it on the driver, and ship its Python package to the executors.

A transform is ``module:function`` (``DataFrame -> DataFrame``), or an SQL query that
`lockstep.spark.sql` turns into one (nothing to ship). Its DataFrame code runs on the
driver, but a Python UDF inside it runs in the executors' Python workers, which import the
UDF's module by name. On a cluster those workers know nothing of the driver's ``PYTHONPATH``,
so the transform's top-level package (or single module) is zipped and handed to Spark
(``SparkContext.addPyFile``, what ``--py-files`` does), which ships it with the job.
"""
from __future__ import annotations

__all__ = [
    "Transform", "first_line", "is_connect_session", "load_transform", "run_query", "ship_to_executors",
]

import atexit
import importlib
import logging
import re
import shutil
import sys
import tempfile
import uuid
import zipfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, cast

from lockstep.errors import TerminalError
from lockstep.spec import PipelineSpec

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)

#: A pipeline's transform: the rows read from Kafka in, the rows to write out.
Transform = Callable[["DataFrame"], "DataFrame"]


def load_transform(spec: PipelineSpec) -> Transform:
    """The spec's transform: its Python function imported, or its SQL query as one (`sql_transform`)."""
    if spec.is_sql:
        return sql_transform(spec)
    module_name, function_name = spec.transform_target
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise TerminalError(f"{spec.path}: transform: cannot import module {module_name!r}: {exc}") from exc
    function: object = getattr(module, function_name, None)
    if not callable(function):
        raise TerminalError(f"{spec.path}: transform: {module_name} has no callable {function_name!r}")
    return function


# ---- SQL transforms --------------------------------------------------------------------------------
# An SQL pipeline's query runs over the view ``input`` in the run's own Spark session. Each checkpoint's
# run has a session of its own (a spark-submit driver, or a Connect session per run attempt,
# `lockstep.spark.connect.checkpoint_session`), so ``input`` names that run's records for that run only.
# One run may apply its transform more than once (a stateful repair recomputes an earlier claim;
# ``lockstep verify`` one checkpoint after another), and Spark Connect analyzes ``spark.sql`` lazily, by
# name: the query's result is kept as a temporary view of its own, whose analyzed plan stays bound to the
# records it was given, whatever ``input`` names later.
#
# The query is analyzed as it is applied, before any transaction opens: Spark's refusal (a syntax error,
# an unknown column) and a query that drops a column the writer needs fail the checkpoint terminally,
# in one line with the spec's path and Spark's line and position. (Here, beside the Python transforms,
# because `load_transform` hands out both and sits below the engine's other layers.)

#: The view the query reads: the records of the checkpoint's ranges, decoded (``data``) with a source format.
INPUT_VIEW = "input"
#: The columns the writer needs of every output row to say which input record it came from.
PROVENANCE = ("topic", "partition", "offset")

#: Spark's two spellings of a place in the query: ``line 2 pos 7`` (analysis), ``(line 1, pos 14)`` (parse).
_AT = re.compile(r"line (\d+),? pos (\d+)")
#: The place as a message's first line ends with it: ``; line 2 pos 7;`` or `` (line 1, pos 14)``.
_PLACE = re.compile(r"\s*[(;]?\s*line \d+,? pos \d+\s*[);]?")


def kept_columns(sink_data: bool, stateful: bool) -> tuple[str, ...]:
    """The columns a query must return: the provenance columns, and the record's value: ``data`` when the sink
    encodes a value format from it (a stateless pipeline), else ``value``."""
    return (*PROVENANCE, "data" if sink_data and not stateful else "value")


def missing_columns(columns: Sequence[str], sink_data: bool, stateful: bool) -> list[str]:
    """The columns the query dropped, of those it must keep (`kept_columns`), in order."""
    return [c for c in kept_columns(sink_data, stateful) if c not in columns]


def position(message: str, query: str, start_index: int | None = None) -> tuple[int, int] | None:
    """Where in the query Spark's message points: (line from 1, position from 0), as Spark counts them; from
    the message's own ``line L pos P``, else from the character offset of its query context; None if neither."""
    found = _AT.search(message)
    if found:
        return int(found.group(1)), int(found.group(2))
    if start_index is not None and 0 <= start_index <= len(query):
        before = query[:start_index]
        return before.count("\n") + 1, start_index - (before.rfind("\n") + 1)
    return None


def first_line(message: str) -> str:
    """Spark's message without its place and plan: its first non-empty line, without ``; line L pos P;``."""
    for line in message.splitlines():
        if line.strip():
            return _PLACE.sub("", line).strip().rstrip(";").strip()
    return message.strip()


def refusal(spec_path: str, origin: str, message: str, query: str, start_index: int | None = None) -> str:
    """The one line an SQL pipeline's checkpoint fails with when Spark refuses its query: the spec, where
    the query is, Spark's line and position and its reason, and the way out."""
    where = "transform.sql" if origin == "inline" else f"transform.sql_file ({origin})"
    at = position(message, query, start_index)
    place = f"line {at[0]}, position {at[1]}: " if at else ""
    return (f"{spec_path}: {where}: Spark refused the query: {place}{first_line(message)}. Fix the query (it is analyzed "
            f"before anything is written; the view {INPUT_VIEW} has the records read, decoded as data with a source format)")


def dropped(spec_path: str, origin: str, missing: Sequence[str], columns: Sequence[str]) -> str:
    """The one line a query that drops a column the writer needs fails with."""
    where = "transform.sql" if origin == "inline" else f"transform.sql_file ({origin})"
    return (f"{spec_path}: {where}: the query returns columns {list(columns)}, missing {list(missing)}: keep the "
            f"input's {', '.join(PROVENANCE)} (they become provenance headers) and the record's value, for example "
            f"SELECT *, ... FROM {INPUT_VIEW} (it is checked before anything is written)")


def sql_transform(spec: PipelineSpec) -> Callable[[DataFrame], DataFrame]:
    """The spec's query as a transform (``DataFrame -> DataFrame``), as `lockstep.transform.load_transform`
    hands out a Python one."""
    assert spec.transform_sql is not None, spec.path

    def transform(df: DataFrame) -> DataFrame:
        return run_query(spec, df)

    transform.__name__ = transform.__qualname__ = "sql"
    return transform


def run_query(spec: PipelineSpec, df: DataFrame) -> DataFrame:
    """The query over ``df`` as the view ``input``, analyzed now and checked for the columns it must keep."""
    query, origin = spec.transform_sql or "", spec.transform_sql_from or "inline"
    spark: SparkSession = df.sparkSession
    df.createOrReplaceTempView(INPUT_VIEW)
    try:
        out = spark.sql(query)
        # Kept under a name of its own: its analyzed plan reads these records, not what `input` names later.
        # Creating the view analyzes the query (a Connect session would only at the first action).
        pinned = f"lockstep_sql_{uuid.uuid4().hex}"
        out.createOrReplaceTempView(pinned)
        out = spark.table(pinned)
        columns = list(out.columns)
    except Exception as exc:
        refused = spark_refusal(spec, exc)
        if refused is None:
            raise
        raise TerminalError(refused) from exc
    missing = missing_columns(columns, spec.sink.value.decoded, spec.state is not None)
    if missing:
        raise TerminalError(dropped(spec.path, origin, missing, columns))
    return out


def spark_refusal(spec: PipelineSpec, exc: BaseException) -> str | None:
    """The line a checkpoint fails with when ``exc`` is Spark refusing the spec's query (a parse or
    analysis error), else None (a server away, say: not the query's fault)."""
    from pyspark.errors import AnalysisException

    if not isinstance(exc, AnalysisException):  # ParseException is one too
        return None
    start = None
    try:
        contexts = exc.getQueryContext()
        start = contexts[0].startIndex() if contexts else None
    except Exception:  # noqa: BLE001 - an exception without a query context: the message may still say where
        pass
    return refusal(spec.path, spec.transform_sql_from or "inline", str(exc), spec.transform_sql or "", start)


def package_source(module_name: str) -> Path | None:
    """The file or folder of ``module_name``'s top-level package, as the driver imported it.

    None for what every Python has anyway (the standard library, site-packages): only the
    user's own code needs shipping.
    """
    top = sys.modules.get(module_name.split(".")[0])
    origin = getattr(top, "__file__", None)
    if top is None or origin is None:
        return None
    path = Path(origin).resolve()
    if "site-packages" in path.parts or "dist-packages" in path.parts or _in_stdlib(path):
        return None
    return path.parent if path.name == "__init__.py" else path


def _in_stdlib(path: Path) -> bool:
    stdlib = Path(sys.base_prefix).resolve() / "lib"
    return stdlib in path.parents


def build_archive(source: Path, into: Path) -> Path:
    """A zip that puts ``source`` (a package folder or one module) at the root of ``sys.path``."""
    archive = into / f"{source.stem if source.is_file() else source.name}.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zf:
        if source.is_file():
            zf.write(source, source.name)
        else:
            for file in sorted(source.rglob("*")):
                if file.is_file() and "__pycache__" not in file.parts and file.suffix != ".pyc":
                    zf.write(file, str(Path(source.name) / file.relative_to(source)))
    return archive


def is_connect_session(spark: object) -> bool:
    """A Spark Connect session (no JVM in this process) rather than a classic one."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def ship_to_executors(spark: object, spec: PipelineSpec, module_names: tuple[str, ...] = ()) -> list[str]:
    """Hand Spark the transform's package (and ``module_names``' packages) for every executor.

    Returns what was shipped, for the log. Call after ``load_transform``: the modules must be imported.
    """
    shipped: list[str] = []
    seen: set[Path] = set()
    folder = Path(tempfile.mkdtemp(prefix=f"lockstep-{spec.name}-pyfiles-"))
    user = () if spec.is_sql else (spec.transform_target[0],)  # an SQL query has no Python of its own
    for name in (*user, *module_names):
        source = package_source(name)
        if source is None or source in seen:
            continue
        seen.add(source)
        archive = build_archive(source, folder)
        session = cast("SparkSession", spark)  # pyspark types its classic and Connect sessions alike
        if is_connect_session(spark):
            session.addArtifacts(str(archive), pyfile=True)  # to this session's Python workers only
        else:
            session.sparkContext.addPyFile(str(archive))
        shipped.append(archive.name)
    if not shipped or is_connect_session(spark):
        shutil.rmtree(folder, ignore_errors=True)  # uploaded to the server already (or nothing built)
    else:  # a classic driver serves the archives from here while its job runs
        atexit.register(shutil.rmtree, folder, True)
    return shipped
