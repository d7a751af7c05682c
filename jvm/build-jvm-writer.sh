#!/usr/bin/env bash
# Builds Lockstep's JVM writer (jvm/jvm-writer) into one small jar, after its unit tests pass.
#
#   jvm/build-jvm-writer.sh PYTHON SPARK_KAFKA_JARS_DIR OUT_JAR [JUNIT_JARS_DIR]
#
# Compiled with javac against the jars the job runs with (the jars/ of PYTHON's pyspark, and
# the kafka-clients and protobuf-java jars of SPARK_KAFKA_JARS_DIR), so nothing is downloaded and the
# classes match what spark-submit loads. Used by `make setup` and the Dockerfile.
#
# With JUNIT_JARS_DIR (a folder holding junit-platform-console-standalone, jvm/maven/junit-pom.xml;
# `make setup` passes .cache/jars/junit), the JUnit tests in jvm/jvm-writer-tests are compiled and
# run first, with PYTHON for the Python side they check against (python_side.py: PYTHON must have
# lockstep installed), and a failing test fails the build: no jar is written. Without it (the
# Dockerfile, which builds the sources `make setup` tested) the tests are skipped.
set -euo pipefail
python=$1 connector=$2 out=$3 junit=${4:-}
src=$(cd "$(dirname "$0")/jvm-writer" && pwd)
tests=$(cd "$(dirname "$0")/jvm-writer-tests" && pwd)
command -v javac >/dev/null || { echo "javac (a JDK 17) is required to build $out" >&2; exit 1; }
spark_jars=$("$python" -c 'import os, pyspark; print(os.path.join(os.path.dirname(pyspark.__file__), "jars"))')
kafka_clients=$(ls "$connector"/kafka-clients-*.jar 2>/dev/null | head -1)
[ -n "$kafka_clients" ] || { echo "no kafka-clients jar in $connector (run the Maven step first)" >&2; exit 1; }
protobuf=$(ls "$connector"/protobuf-java-*.jar 2>/dev/null | head -1)
[ -n "$protobuf" ] || { echo "no protobuf-java jar in $connector (run the Maven step first)" >&2; exit 1; }
[ -d "$spark_jars" ] || { echo "pyspark's jars folder not found: $spark_jars" >&2; exit 1; }
classes=$(mktemp -d)
trap 'rm -rf "$classes"' EXIT
javac --release 17 -nowarn -encoding UTF-8 -cp "$spark_jars/*:$kafka_clients:$protobuf" -d "$classes/main" \
    $(find "$src" -name '*.java' | sort)

if [ -n "$junit" ]; then
    launcher=$(ls "$junit"/junit-platform-console-standalone-*.jar 2>/dev/null | head -1)
    [ -n "$launcher" ] || { echo "no junit-platform-console-standalone jar in $junit (run the Maven step first)" >&2; exit 1; }
    # The tests run python_side.py as a child process: give them an absolute interpreter path.
    case $python in */*) python_path=$(cd "$(dirname "$python")" && pwd)/$(basename "$python") ;;
                    *) python_path=$(command -v "$python") ;; esac
    cp="$classes/main:$spark_jars/*:$kafka_clients:$protobuf"
    javac --release 17 -nowarn -encoding UTF-8 -cp "$cp:$launcher" -d "$classes/test" \
        $(find "$tests" -name '*.java' | sort)
    started=$(date +%s%N)
    # The launcher in the tests' JVM (-cp expands the jars/* wildcard). Its summary, the tests' failures
    # and the writer's log lines are shown only when a test fails; otherwise one line.
    if java -XX:TieredStopAtLevel=1 -Dlockstep.python="$python_path" -Dlockstep.python_side="$tests/python_side.py" \
            -cp "$launcher:$classes/test:$cp" org.junit.platform.console.ConsoleLauncher execute \
            --disable-banner --disable-ansi-colors --details=summary --fail-if-no-tests \
            --scan-class-path "$classes/test" >"$classes/junit.log" 2>&1; then
        summary=$(sed -n 's/^\[ *\([0-9]*\) tests successful *\]$/\1/p' "$classes/junit.log")
        ms=$(( ($(date +%s%N) - started) / 1000000 ))
        printf 'JVM writer JUnit tests: %s passed, 0 failed (%d.%d s)\n' "$summary" $((ms / 1000)) $((ms % 1000 / 100))
    else
        cat "$classes/junit.log" >&2
        echo "JVM writer JUnit tests failed (jvm/jvm-writer-tests); $out not built" >&2
        exit 1
    fi
else
    echo "JVM writer JUnit tests skipped (no JUnit jar folder given)"
fi

# Registers the data sources' short names (lockstep-kafka, lockstep-kafka-ranges) with Spark's DataSourceRegister lookup.
mkdir -p "$classes/main/META-INF/services"
printf "%s\n" dev.lockstep.spark.LockstepKafkaSource dev.lockstep.spark.KafkaRangesSource \
    > "$classes/main/META-INF/services/org.apache.spark.sql.sources.DataSourceRegister"
mkdir -p "$(dirname "$out")"
jar --create --file "$out.tmp" -C "$classes/main" .
mv "$out.tmp" "$out"
echo "built $out"
