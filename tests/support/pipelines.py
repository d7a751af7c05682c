"""A throwaway pipeline on a real broker: fresh topics and the names a test needs to check them.
Integration tests write its spec for the CLI (``engine_helpers.make_pipeline``), Airflow tests for
the scheduler (``AirflowServer.new_pipeline``)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

from tests.support.topics import create_topics


@dataclass
class PipelineUnderTest:
    name: str
    spec_path: Path
    bootstrap: str
    source: str
    sink: str
    dead_letters: str
    prefix: str

    @classmethod
    def create(cls, spec_dir: Path, bootstrap: str, name: str, unique: str, partitions: int = 4,
               replication: int = 1) -> PipelineUnderTest:
        """Names from ``unique`` (in-, out-, dlq-, tx-) and the three topics created: source and sink
        with ``partitions``, dead letters with one. The spec file is the caller's to write."""
        p = cls(name, spec_dir / f"{name}.yaml", bootstrap, f"in-{unique}", f"out-{unique}", f"dlq-{unique}",
                f"tx-{unique}")
        create_topics(bootstrap, {p.source: partitions, p.sink: partitions, p.dead_letters: 1}, replication)
        return p

    def spec(self):
        from lockstep.spec import load_spec

        return load_spec(self.spec_path)

    def rewrite(self, **changes: dict) -> None:
        """Edit sections of the spec file (e.g. raise the transaction timeout)."""
        doc = yaml.safe_load(self.spec_path.read_text())
        for section, values in changes.items():
            doc[section].update(values)
        self.spec_path.write_text(yaml.safe_dump(doc))
