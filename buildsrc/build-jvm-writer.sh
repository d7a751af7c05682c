#!/usr/bin/env bash
# Builds Lockstep's JVM writer (buildsrc/jvm-writer) into one small jar.
#
#   buildsrc/build-jvm-writer.sh PYTHON SPARK_KAFKA_JARS_DIR OUT_JAR
#
# Compiled with javac against the jars the job runs with (the jars/ of PYTHON's pyspark and
# the kafka-clients jar of the Spark Kafka connector), so nothing is downloaded and the
# classes match what spark-submit loads. Used by `make setup` and the Dockerfile.
set -euo pipefail
python=$1 connector=$2 out=$3
src=$(cd "$(dirname "$0")/jvm-writer" && pwd)
command -v javac >/dev/null || { echo "javac (a JDK 17) is required to build $out" >&2; exit 1; }
spark_jars=$("$python" -c 'import os, pyspark; print(os.path.join(os.path.dirname(pyspark.__file__), "jars"))')
kafka_clients=$(ls "$connector"/kafka-clients-*.jar 2>/dev/null | head -1)
[ -n "$kafka_clients" ] || { echo "no kafka-clients jar in $connector (run the Maven step first)" >&2; exit 1; }
[ -d "$spark_jars" ] || { echo "pyspark's jars folder not found: $spark_jars" >&2; exit 1; }
classes=$(mktemp -d)
trap 'rm -rf "$classes"' EXIT
javac --release 17 -nowarn -encoding UTF-8 -cp "$spark_jars/*:$kafka_clients" -d "$classes" \
    $(find "$src" -name '*.java' | sort)
# Registers the data source's short name (lockstep-kafka) with Spark's DataSourceRegister lookup.
mkdir -p "$classes/META-INF/services"
echo dev.lockstep.spark.LockstepKafkaSource > "$classes/META-INF/services/org.apache.spark.sql.sources.DataSourceRegister"
mkdir -p "$(dirname "$out")"
jar --create --file "$out.tmp" -C "$classes" .
mv "$out.tmp" "$out"
echo "built $out"
