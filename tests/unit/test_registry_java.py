"""Which JDK runs the Schema Registry (Java 21+), chosen on fake JDK folders: no Java is run."""
from __future__ import annotations

from pathlib import Path

import pytest

from lockstep.paths import REGISTRY_JAVA_HOME_ENV, java_major, registry_java


def jdk(parent: Path, name: str, version: str | None, with_java: bool = True) -> Path:
    """A folder that looks like a JDK: a ``release`` file naming ``version`` and ``bin/java``."""
    home = parent / name
    (home / "bin").mkdir(parents=True)
    if version is not None:
        (home / "release").write_text(f'IMPLEMENTOR="Test"\nJAVA_VERSION="{version}"\nOS_NAME="Linux"\n')
    if with_java:
        (home / "bin" / "java").write_text("#!/bin/sh\n")
    return home


@pytest.mark.parametrize("version, major", [("25.0.3", 25), ("17.0.15", 17), ("21", 21), ("1.8.0_402", 8),
                                            ("22-ea", 22), ("nonsense", None)])
def test_the_major_version_comes_from_the_release_file(tmp_path, version, major):
    assert java_major(jdk(tmp_path, "j", version)) == major


def test_without_a_release_file_there_is_no_version(tmp_path):
    assert java_major(jdk(tmp_path, "j", None)) is None


def test_the_newest_jdk_of_21_or_more_under_the_jvm_folder_wins_over_a_java_17_home(tmp_path):
    jvm = tmp_path / "jvm"
    old = jdk(jvm, "java-17-openjdk-amd64", "17.0.15")
    jdk(jvm, "temurin-21-jdk-amd64", "21.0.5")
    newest = jdk(jvm, "temurin-25-jdk-amd64", "25.0.3")
    jdk(jvm, "broken-26", "26.0.1", with_java=False)  # a release file without bin/java is no JDK
    assert registry_java({"JAVA_HOME": str(old)}, jvm_dir=jvm) == newest / "bin" / "java"


def test_a_java_home_of_21_or_more_is_used_before_searching(tmp_path):
    jvm = tmp_path / "jvm"
    jdk(jvm, "temurin-25-jdk-amd64", "25.0.3")
    home = jdk(tmp_path, "my-jdk-21", "21.0.2")
    assert registry_java({"JAVA_HOME": str(home)}, jvm_dir=jvm) == home / "bin" / "java"


def test_the_explicit_setting_wins_and_an_old_one_is_refused_not_skipped(tmp_path):
    jvm = tmp_path / "jvm"
    jdk(jvm, "temurin-25-jdk-amd64", "25.0.3")
    chosen = jdk(tmp_path, "chosen-23", "23.0.1")
    assert registry_java({REGISTRY_JAVA_HOME_ENV: str(chosen)}, jvm_dir=jvm) == chosen / "bin" / "java"
    old = jdk(tmp_path, "old-17", "17.0.15")
    with pytest.raises(FileNotFoundError, match=rf"{REGISTRY_JAVA_HOME_ENV}=.*old-17 is Java 17"):
        registry_java({REGISTRY_JAVA_HOME_ENV: str(old)}, jvm_dir=jvm)


def test_none_found_names_everything_looked_at(tmp_path):
    jvm = tmp_path / "jvm"
    jdk(jvm, "java-17-openjdk-amd64", "17.0.15")
    (jvm / "openjdk-17").mkdir()  # a folder without a release file
    home = jdk(tmp_path, "home-11", "11.0.20")
    with pytest.raises(FileNotFoundError) as error:
        registry_java({"JAVA_HOME": str(home)}, jvm_dir=jvm)
    message = str(error.value)
    assert "no Java 21 or newer" in message and REGISTRY_JAVA_HOME_ENV in message
    assert f"JAVA_HOME={home} (Java 11)" in message
    assert "java-17-openjdk-amd64 (Java 17)" in message and "openjdk-17 (no JDK)" in message


def test_a_missing_jvm_folder_is_named_too(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such folder"):
        registry_java({}, jvm_dir=tmp_path / "absent")
