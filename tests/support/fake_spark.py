"""A Spark session without Spark, for unit tests of what the job asks of its session
(`lockstep.spark.target.JobSession`): the runtime settings it sets and the reads it makes. A read
records its format and options and loads ``loaded`` (whatever the test hands it), so no DataFrame
exists; tests that need real rows use a local Spark session (integration tests)."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any


class FakeConf:
    """A session's runtime configuration; ``modifiable`` says which keys a session may set
    (a Connect session refuses the server's start-up settings)."""

    def __init__(self, modifiable: Callable[[str], bool] = lambda key: True) -> None:
        self.values: dict[str, str] = {}
        self._modifiable = modifiable

    def set(self, key: str, value: str) -> None:
        self.values[key] = value

    def unset(self, key: str) -> None:
        self.values.pop(key, None)

    def isModifiable(self, key: str) -> bool:
        return self._modifiable(key)


class FakeReader:
    def __init__(self, session: FakeSession) -> None:
        self._session = session
        self.source: str | None = None
        self.options: dict[str, str] = {}

    def format(self, source: str) -> FakeReader:
        self.source = source
        return self

    def option(self, key: str, value: str) -> FakeReader:
        self.options[key] = value
        return self

    def load(self) -> Any:
        self._session.reads.append((self.source, dict(self.options)))
        return self._session.loaded


class FakeFrame:
    """What ``spark.range`` gives: enough of a DataFrame for `kafka_reader.default_parallelism`."""

    def __init__(self, partitions: int) -> None:
        self._partitions = partitions

    def selectExpr(self, *exprs: str) -> FakeFrame:
        return self

    def first(self) -> dict[str, int]:
        return {"last": self._partitions - 1}


class FakeSession:
    def __init__(self, modifiable: Callable[[str], bool] = lambda key: True, loaded: Any = None,
                 default_parallelism: int = 2) -> None:
        self.conf = FakeConf(modifiable)
        #: (format, options) of every read, in order
        self.reads: list[tuple[str | None, dict[str, str]]] = []
        self.loaded = loaded
        self.default_parallelism = default_parallelism

    def range(self, start: int, end: int | None = None) -> FakeFrame:
        return FakeFrame(self.default_parallelism)

    @property
    def read(self) -> FakeReader:
        return FakeReader(self)
