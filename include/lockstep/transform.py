"""The user's transform: import it on the driver, and ship its Python package to the executors.

A transform is ``module:function`` (``DataFrame -> DataFrame``), or an SQL query that
`lockstep.sql.analyzer` turns into one (nothing to ship). Its DataFrame code runs on the
driver, but a Python UDF inside it runs in the executors' Python workers, which import the
UDF's module by name. On a cluster those workers know nothing of the driver's ``PYTHONPATH``,
so the transform's top-level package (or single module) is zipped and handed to Spark
(``SparkContext.addPyFile``, what ``--py-files`` does), which ships it with the job.
"""
from __future__ import annotations

__all__ = [
    "StaleSession", "Transform", "is_connect_session", "load_transform", "ship_to_executors",
]

import atexit
import importlib
import logging
import shutil
import sys
import tempfile
import zipfile
from collections.abc import Callable
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
    """The spec's transform: its Python function imported, or its SQL query as one (`lockstep.sql.runtime.sql_transform`)."""
    if spec.is_sql:
        from lockstep.sql.runtime import sql_transform

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
    archives: list[Path] = []
    seen: set[Path] = set()
    folder = Path(tempfile.mkdtemp(prefix=f"lockstep-{spec.name}-pyfiles-"))
    user = () if spec.is_sql else (spec.transform_target[0],)  # an SQL query has no Python of its own
    for name in (*user, *module_names):
        source = package_source(name)
        if source is None or source in seen:
            continue
        seen.add(source)
        archives.append(build_archive(source, folder))
    session = cast("SparkSession", spark)  # pyspark types its classic and Connect sessions alike
    if is_connect_session(spark):
        try:
            if _in_session_already(session, archives):
                return [f"{a.name} (in the session already)" for a in archives]
            for archive in archives:
                session.addArtifacts(str(archive), pyfile=True)  # to this session's Python workers only
        finally:
            shutil.rmtree(folder, ignore_errors=True)  # uploaded to the server already (or nothing built)
    else:
        for archive in archives:
            session.sparkContext.addPyFile(str(archive))
        # a classic driver serves the archives from here while its job runs
        atexit.register(shutil.rmtree, folder, True)
    return [a.name for a in archives]


class StaleSession(Exception):
    """A warm Connect session (`lockstep.spark.connect`) holds code for the executors other than this run's: a
    transform redeployed since. The run releases it and takes a new one."""


#: The session conf key under which a Connect session records the code shipped to its executors: the digest of
#: the archives, in order.
SHIPPED_CONF = "spark.lockstep.shipped"


def _in_session_already(session: SparkSession, archives: list[Path]) -> bool:
    """Whether a (warm) Connect session holds exactly ``archives`` already, and so needs none of them again.
    A new session is marked with them (the caller then adds them); one that holds other code (a transform
    redeployed since) cannot take these: a Python worker keeps a module it imported, and the server refuses
    a pyfile of the same name with other bytes. `StaleSession` then sends the run to a new session."""
    import hashlib

    digest = hashlib.sha256()
    for archive in archives:
        digest.update(archive.name.encode() + b"\0" + hashlib.sha256(archive.read_bytes()).digest())
    shipped = digest.hexdigest() if archives else ""
    held = session.conf.get(SHIPPED_CONF, "")
    if held == shipped:
        return True
    if held:
        raise StaleSession(f"the session holds other code for the executors than this run ships "
                           f"({', '.join(a.name for a in archives) or 'none'})")
    session.conf.set(SHIPPED_CONF, shipped)
    return False
