"""Where the JVM writer jar is found: the shared build in .cache, or another one named by
LOCKSTEP_WRITER_JAR (a build of a changed source tree, tested without replacing the shared one)."""
from __future__ import annotations

import pytest

from lockstep.paths import cache_dir, jvm_writer_jar


def test_the_writer_jar_is_the_shared_build_by_default(monkeypatch, tmp_path):
    monkeypatch.delenv("LOCKSTEP_WRITER_JAR", raising=False)
    monkeypatch.setenv("LOCKSTEP_HOME", str(tmp_path))
    jar = cache_dir() / "jars" / "lockstep" / "lockstep-jvm-writer.jar"
    jar.parent.mkdir(parents=True)
    jar.write_bytes(b"PK")
    assert jvm_writer_jar() == str(jar)


def test_lockstep_writer_jar_names_another_build(monkeypatch, tmp_path):
    jar = tmp_path / "mine.jar"
    jar.write_bytes(b"PK")
    monkeypatch.setenv("LOCKSTEP_WRITER_JAR", str(jar))
    assert jvm_writer_jar() == str(jar.resolve())


def test_a_missing_writer_jar_says_how_to_build_it(monkeypatch, tmp_path):
    monkeypatch.setenv("LOCKSTEP_WRITER_JAR", str(tmp_path / "absent.jar"))
    with pytest.raises(FileNotFoundError, match="absent.jar.*make setup"):
        jvm_writer_jar()
