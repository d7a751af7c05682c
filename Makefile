# Lockstep developer entry points. Everything a fresh machine needs is installed
# from here: the venv (Python deps pinned in requirements.lock), full pyspark,
# the Kafka / Spark-Kafka jars and the Schema Registry (Apicurio) resolved from Maven Central and the
# MinIO S3 server built from its Go module. Build outputs go to .cache/; downloads stay in the tools'
# own per-user caches (uv's, Maven's ~/.m2, Go's), shared by every clone on the machine.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
UV := $(BIN)/uv
STAMP := $(VENV)/.lockstep-installed
MAVEN_SETTINGS := jvm/maven/settings.xml
PYSPARK_VERSION := $(shell sed -n 's/^pyspark==//p' requirements.lock)

.PHONY: setup browser lint spark-archive bytecode test unit integration demo bench bench-state bench-windows bench-joins bench-iceberg bench-formats bench-freshness bench-pipelines bench-lag-fleet soak soak-submit soak-state up down status clean lock

WRITER_JAR := .cache/jars/lockstep/lockstep-jvm-writer.jar
# MinIO, the local S3 server of `lockstep dev`: MinIO publishes no versioned Go module, so the
# pin is the module proxy's pseudo-version of a master commit. Change it here only.
MINIO_MODULE := github.com/minio/minio@v0.0.0-20260212201848-7aac2a2c5b7c
MINIO_BIN := .cache/bin/minio
# Apicurio Registry, the local Schema Registry of `lockstep dev` (docs/platform.md); its version is
# lockstep.paths.REGISTRY_VERSION, read from there so the two never disagree.
REGISTRY_VERSION := $(shell sed -n 's/^REGISTRY_VERSION = "\(.*\)"$$/\1/p' include/lockstep/paths.py)
REGISTRY_DIR := .cache/apicurio-registry-$(REGISTRY_VERSION)
REGISTRY_STAMP := $(REGISTRY_DIR)/.unpacked
# Maven's local repository: the registry's archive is unpacked from there. The default one, as every
# `mvn -s $(MAVEN_SETTINGS)` here uses (those settings name no other); override both with MAVEN_REPO=...
MAVEN_REPO ?= $(HOME)/.m2/repository

setup: $(STAMP) .cache/jars/.resolved $(WRITER_JAR) $(MINIO_BIN) $(REGISTRY_STAMP) .cache/jars/.iceberg-resolved

$(VENV)/bin/python:
	@command -v $(PYTHON) >/dev/null || { echo "Python 3.11 is required ($(PYTHON) not found)"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --disable-pip-version-check uv==0.13.9

# --compile-bytecode: write every package's .pyc now. Where PYTHONDONTWRITEBYTECODE is set
# (CI machines, some containers) Python never caches them itself and every process, from a
# plan task to a Spark worker, would compile boto3, pyspark and Airflow from source again.
$(STAMP): $(VENV)/bin/python requirements.lock pyproject.toml Makefile
	$(UV) pip sync --python $(BIN)/python -q --compile-bytecode requirements.lock
	# The spark provider's pyspark-client shares pyspark's Python files; install full pyspark
	# again last so its Python side matches its jars. Uninstalled and installed, not --reinstall:
	# that implies --refresh, and uv then built pyspark from its sdist again, 1.3 GB more in its
	# cache at every fresh clone's set-up (46 GB after a day of CI rehearsals filled the disk).
	$(UV) pip uninstall --python $(BIN)/python -q pyspark
	$(UV) pip install --python $(BIN)/python -q --compile-bytecode --no-deps pyspark==$(PYSPARK_VERSION)
	$(UV) pip install --python $(BIN)/python -q --no-deps -e .
	touch $@

.cache/jars/.resolved: jvm/maven/kafka-pom.xml jvm/maven/spark-kafka-pom.xml
	@command -v java >/dev/null || { echo "Java 17 is required (java not found on PATH)"; exit 1; }
	@command -v mvn >/dev/null || { echo "Maven is required (mvn not found on PATH)"; exit 1; }
	rm -rf .cache/jars/kafka .cache/jars/spark-kafka
	mvn -q -B -s $(MAVEN_SETTINGS) -f jvm/maven/kafka-pom.xml dependency:copy-dependencies \
	    -DoutputDirectory=$(CURDIR)/.cache/jars/kafka -DincludeScope=runtime
	mvn -q -B -s $(MAVEN_SETTINGS) -f jvm/maven/spark-kafka-pom.xml dependency:copy-dependencies \
	    -DoutputDirectory=$(CURDIR)/.cache/jars/spark-kafka -DincludeScope=runtime
	touch $@

# JUnit's console launcher, which runs the JVM writer's unit tests (jvm/jvm-writer-tests).
# After the other resolve (order only): two Maven runs at once could write the same file of ~/.m2 (it has no lock).
.cache/jars/.junit-resolved: jvm/maven/junit-pom.xml | .cache/jars/.resolved
	@command -v mvn >/dev/null || { echo "Maven is required (mvn not found on PATH)"; exit 1; }
	rm -rf .cache/jars/junit
	mvn -q -B -s $(MAVEN_SETTINGS) -f jvm/maven/junit-pom.xml dependency:copy-dependencies \
	    -DoutputDirectory=$(CURDIR)/.cache/jars/junit -DincludeScope=runtime
	touch $@

# The local Iceberg REST catalog (lockstep_dev.iceberg_catalog): Iceberg's own server and S3FileIO.
# After the other resolves (order only): Maven's ~/.m2 has no lock.
.cache/jars/.iceberg-resolved: jvm/maven/iceberg-rest-pom.xml | .cache/jars/.junit-resolved
	@command -v mvn >/dev/null || { echo "Maven is required (mvn not found on PATH)"; exit 1; }
	rm -rf .cache/jars/iceberg-rest
	mvn -q -B -s $(MAVEN_SETTINGS) -f jvm/maven/iceberg-rest-pom.xml dependency:copy-dependencies \
	    -DoutputDirectory=$(CURDIR)/.cache/jars/iceberg-rest -DincludeScope=runtime
	touch $@

# Lockstep's JVM writer, compiled against pyspark's own jars and the connector's kafka-clients, after
# its JUnit tests pass (a failing test fails the build). The tests check the writer against the Python
# side's contract and settings, so a change there runs them again too.
$(WRITER_JAR): $(STAMP) .cache/jars/.resolved .cache/jars/.junit-resolved jvm/build-jvm-writer.sh \
               $(shell find jvm/jvm-writer jvm/jvm-writer-tests -name '*.java' -o -name '*.py') \
               include/lockstep/model/output_contract.py include/lockstep/model/checkpoint.py \
               include/lockstep/model/failpoints.py \
               include/lockstep/spark/writer_settings.py include/lockstep/spark/jvm_writer.py
	bash jvm/build-jvm-writer.sh $(BIN)/python .cache/jars/spark-kafka $@ .cache/jars/junit

# Go's module and build caches stay where Go keeps them for every project of this user (`go env
# GOMODCACHE GOCACHE`, ~/go/pkg/mod and ~/.cache/go-build), as Maven's ~/.m2 and uv's ~/.cache/uv
# do: a second clone on the same machine links MinIO from cache in seconds instead of compiling it
# for minutes. Only the binary lands in .cache/bin; -modcacherw keeps the module cache deletable.
# The empty stamp is named after the pin, so changing MINIO_MODULE rebuilds the binary.
MINIO_PIN := .cache/bin/.minio-pin-$(lastword $(subst @, ,$(MINIO_MODULE)))
$(MINIO_PIN): ;
$(MINIO_BIN): $(MINIO_PIN)
	@command -v go >/dev/null || { echo "Go is required to build the local S3 server, MinIO (go not found on PATH; install Go 1.24 or newer from https://go.dev/dl/)"; exit 1; }
	mkdir -p .cache/bin && touch $(MINIO_PIN)
	GOFLAGS=-modcacherw GOBIN=$(CURDIR)/.cache/bin go install $(MINIO_MODULE)
	touch $@

# Apicurio Registry's ready Quarkus application (the tar.gz with classifier `all`, 158 MB) from Maven
# Central into Maven's own cache, unpacked with GNU tar: maven-dependency-plugin's unpack truncates the
# archive's long (pax) file names. It runs on Java 21+ (lockstep.paths.registry_java finds one); Maven
# itself runs on any Java.
$(REGISTRY_STAMP): | .cache/jars/.junit-resolved
	@command -v mvn >/dev/null || { echo "Maven is required (mvn not found on PATH)"; exit 1; }
	mvn -q -B -s $(MAVEN_SETTINGS) -Dmaven.repo.local=$(MAVEN_REPO) dependency:get -Dtransitive=false \
	    -Dartifact=io.apicurio:apicurio-registry-app:$(REGISTRY_VERSION):tar.gz:all
	rm -rf $(REGISTRY_DIR) && mkdir -p $(REGISTRY_DIR)
	tar -xzf $(MAVEN_REPO)/io/apicurio/apicurio-registry-app/$(REGISTRY_VERSION)/apicurio-registry-app-$(REGISTRY_VERSION)-all.tar.gz \
	    -C $(REGISTRY_DIR)
	touch $@

# Regenerate the lock after editing pyproject.toml dependencies.
lock: $(VENV)/bin/python
	$(UV) pip compile pyproject.toml --extra dev --python-version 3.11 -o requirements.lock -q

# Lint (pyproject.toml configures both): ruff over every Python file of the project, mypy (strict)
# over the core library, the Airflow plugin, the DAG files, the Spark job and the bench, soak, dev and
# example packages. Needs the venv only; `make test` runs it first.
lint: $(STAMP)
	$(BIN)/ruff check include plugins jobs dags tests scripts jvm config
	$(BIN)/mypy

# Tiers (docs/testing.md): `unit` needs the venv only (no Java, Maven, Go or service) and runs
# in well under two minutes; `integration` adds the real services; `test` runs every tier.
unit: $(STAMP)
	$(BIN)/python -m pytest tests/unit tests/dags -q

# Four workers (pytest-xdist) on the two cores, each with its own platform: the cluster's modules one
# unit of work, Airflow's another, every other module its own, each on whichever worker is free
# (tests/conftest.py, docs/testing.md). Much of a test is waiting (a JVM's start, a transaction
# timeout, the scheduler's next loop): a third worker filled it (pytest 23.2 min against 26.8-30.8 on two),
# and a fourth fills more: two fresh clones of the same code an hour apart, 1,878 s on three workers and
# 1,595 s on four (2026-12-04, docs/testing.md), memory at most 12 of 23 GiB.
XDIST := -n 4 --dist loadscope

# A class-data-sharing archive of Spark's classes for the test session's Spark JVMs (tests/support/spark_archive.py:
# a spark-submit's JVM about 4 s of CPU less); without it the tests run as before.
spark-archive: setup
	$(BIN)/python -m tests.support.spark_archive

# The project's own modules compiled to bytecode now (about 0.4 s): where PYTHONDONTWRITEBYTECODE is set,
# as on this machine, every Python process a test starts (a task, a CLI, a Spark worker) otherwise compiles
# the modules it imports from source again: about 0.1 s of CPU each (0.24 -> 0.15 s for the run's imports).
bytecode: setup
	$(BIN)/python -m compileall -q include plugins jobs dags tests/support

integration: setup browser spark-archive bytecode
	$(BIN)/python -m pytest tests/integration tests/airflow -q $(XDIST) --durations=20

# The long soak: at least 200 faults of every kind on the cluster topology (a platform of its own on
# free ports, under var/soak), in connect mode (a Spark Connect server on the cluster), then the audit;
# writes docs/RELIABILITY.md. About an hour on 2 cores. Seed 247's first 215 faults hold at least 14 of
# each kind issue 43 added (kill_connect, broker_commit, partial_commit, duplicate_run); each partial
# commit waits out the 30 s transaction timeout. The short soak (13 cycles) is part of `make test`.
SOAK_ARGS ?= --seed 247 --cycles 80 --min-faults 200 --faults-per-cycle 3 --more 0.9 --records 200 --timeout-ms 30000
soak: setup
	$(BIN)/lockstep soak $(SOAK_ARGS) --report docs/RELIABILITY.md

# The same in submit mode (a spark-submit per run), the seven kinds the soak had then; writes
# docs/RELIABILITY-submit.md (80 min at 014f14d).
SOAK_SUBMIT_ARGS ?= --seed 356608166 --cycles 80 --min-faults 200 --faults-per-cycle 3 --more 0.9 --records 200 \
	--faults kill_run,broker_coordinator,broker_sink_leader,s3_restart,s3_slow,s3_errors,commit_late
soak-submit: setup
	$(BIN)/lockstep soak --mode submit $(SOAK_SUBMIT_ARGS) --report docs/RELIABILITY-submit.md

# The stateful soak: the same faults on a windowed pipeline with keyed state in S3 (kill_run kills a
# stateful run mid-way), on the cluster topology in connect mode; the audit recomputes every window from
# the whole input and checks the committed state against it. Writes docs/RELIABILITY-state.md; ~25 min
# on 2 cores. Seed 641's first 40 cycles plan 4 to 7 of each kind issue 43 added and 14 S3 faults or
# kills anchored while state is half uploaded or half collected; override for another seed.
SOAK_STATE_ARGS ?= --seed 1120 --cycles 110 --faults-per-cycle 3 --more 0.9 --records 200 --timeout-ms 30000
soak-state: setup
	$(BIN)/lockstep soak --stateful $(SOAK_STATE_ARGS) --report docs/RELIABILITY-state.md

# Debian's Chromium for the Checkpoints page browser test (no-op when present).
browser:
	bash scripts/install-chromium.sh

# The set-up's parts side by side (the venv, Maven's resolves one after another, MinIO's build, the
# browser: 66 s one after another on a fresh clone, 53 s so, measured once each), then lint and the class
# archive side by side (each about 30 s, neither needs the other).
test:
	$(MAKE) --no-print-directory -j2 setup browser
	$(MAKE) --no-print-directory -j2 lint spark-archive bytecode
	$(BIN)/python -m pytest -q $(XDIST) --durations=40

# The README's first command: platform + Airflow + the example pipeline, 3 checkpoints.
demo: setup
	$(BIN)/lockstep demo

# Lockstep against Spark's own Kafka pipeline and the raw client ceiling, on its own platform;
# rewrites docs/BENCHMARKS.md (about 30 minutes; `lockstep bench --help` for smaller runs). The first
# run sets up the Flink SQL and Quix Streams peers in .cache/bench/ (PyPI, Maven Central); --no-peers skips them.
# First the peers' correctness test (tests/integration/test_bench_peers.py: each peer commits exactly what the shared
# transform makes of its input) and the quick bench end to end (tests/integration/test_bench_smoke.py: every table
# of the report from a tiny run), which `make test` skips: a peer that is wrong is not raced, and a bench that
# breaks does so in two minutes, not thirty.
bench: setup
	LOCKSTEP_BENCH_PEERS=1 LOCKSTEP_BENCH_SMOKE=1 $(BIN)/python -m pytest -q -p no:cacheprovider \
		tests/integration/test_bench_peers.py tests/integration/test_bench_smoke.py
	$(BIN)/lockstep bench --results var/bench/results.json

# Only the generated pipelines in one Airflow (50 due every minute, one task each, Airflow's database on
# PostgreSQL; --pipelines, --pipelines-tasks, --airflow-db in `lockstep bench --help`): DAG parse time, the
# scheduler's loop, the runs that complete within their minute, S3 calls per plan, the Checkpoints page at
# 10,000 checkpoints, on a platform of their own; replaces that section of docs/BENCHMARKS.md (about 6 minutes).
bench-pipelines: setup
	$(BIN)/lockstep bench --pipelines-only --results var/bench/pipelines-results.json

# 200 lag-triggered pipelines in one Airflow (PostgreSQL), 20 of them fed at 1,000 records/s each, the rest idle:
# every fed pipeline's produce-to-visible latency (every sink read back record by record), the runs the idle ones
# start (none, the target), the CPU of Airflow's scheduler, triggerer and tasks and of Spark Connect; on its own
# platform; rewrites docs/BENCHMARKS-lag-fleet.md and its section of docs/BENCHMARKS.md (about 8 minutes; --lag-fleet-pipelines, --lag-fleet-fed,
# --lag-fleet-rate, --lag-fleet-seconds in `lockstep bench --help`).
bench-lag-fleet: setup
	$(BIN)/lockstep bench --lag-fleet-only --results var/bench/lag-fleet-results.json --report docs/BENCHMARKS-lag-fleet.md

# What keyed state costs per checkpoint at 100,000, 1,000,000 and 10,000,000 keys (load, apply and write
# seconds, bytes uploaded, compaction, restores on a new host and on the same host, three rounds), a stateful
# pipeline beside a stateless one, on its own platform, then Flink SQL's RocksDB restores of the 10M-key state,
# from its local disk and again from S3; rewrites docs/BENCHMARKS-state.md (about 25 minutes, 14 without Flink,
# and 10 GB of disk; --state-keys, --state-restores etc. in `lockstep bench --help`). The first run sets up the
# Flink SQL peer in .cache/bench/; --state-no-flink skips it, --state-no-flink-s3 its restores from S3.
bench-state: setup
	$(BIN)/lockstep bench --state-only --results var/bench/state-results.json --report docs/BENCHMARKS-state.md

# A windowed count per key over 1,000,000 records, exactly-once Kafka to Kafka, Lockstep against Flink SQL
# (RocksDB, incremental checkpoints) and Quix Streams, every sink checked window by window, on its own
# platform; rewrites docs/BENCHMARKS-windows.md (about 10 minutes; sets up the peers as `bench` does).
bench-windows: setup
	$(BIN)/lockstep bench --windows-only --results var/bench/windows-results.json --report docs/BENCHMARKS-windows.md

# 1,000,000 orders enriched from a table of 100,000 customers (a compacted topic), exactly-once Kafka to Kafka,
# Lockstep's `tables:` join (connect mode) against Flink SQL's event-time temporal join on an upsert-kafka table,
# and Lockstep without the table as a reference, every sink checked order by order, on its own platform; rewrites
# docs/BENCHMARKS-joins.md, whose figures docs/BENCHMARKS.md's "Joins" states (about 9 to 11 minutes; --joins-records,
# --joins-keys in `lockstep bench --help`). The first run sets up the Flink SQL peer in .cache/bench/.
bench-joins: setup
	$(BIN)/lockstep bench --joins-only --results var/bench/joins-results.json --report docs/BENCHMARKS-joins.md

# Kafka → Iceberg exactly once: 10,000,000 orders into a new table per run, Lockstep (connect mode: sink.iceberg beside its
# Kafka topic, and the table alone) against Flink SQL with Iceberg's Flink sink (the table only, and the table plus an
# exactly-once Kafka topic), two rounds in rotated order, every table scanned back row by row; then 1,000,000 records in 10 checkpoints
# (files per checkpoint) and `lockstep iceberg compact --keep 1` (files after). On its own platform with the REST
# catalog; rewrites docs/BENCHMARKS-iceberg.md (about 30 minutes). The first run sets up the Flink peer with Iceberg's
# runtime in .cache/bench/flink-iceberg/.
bench-iceberg: setup
	$(BIN)/lockstep bench --iceberg-only --repeats 2 --iceberg-no-warm-up --results var/bench/iceberg-results.json --report docs/BENCHMARKS-iceberg.md

# 10,000,000 orders as registry-framed Avro through Lockstep (parse, filter, encode, connect mode), the JSON
# benchmark transform beside it, and kafka-producer-perf-test with as many producers as Lockstep's transactions,
# alternated, every sink read back, then where the time goes (decode, encode); on its own platform (with the
# Schema Registry); rewrites docs/BENCHMARKS-formats.md, whose figures docs/BENCHMARKS.md's "Formats" states
# (about 20 minutes; --formats-records, --repeats in `lockstep bench --help`).
bench-formats: setup
	$(BIN)/lockstep bench --formats-only --results var/bench/formats-results.json --report docs/BENCHMARKS-formats.md

# Produce-to-visible latency at steady rates (2k, 20k, 100k records/s, 150 s each): Lockstep through the real Airflow
# scheduler (a lag-triggered pipeline, connect mode) against Flink SQL (checkpoints every 5 s) and Quix Streams (commit
# every 5 s), every sink read back record by record, on its own platform; then the windowed pipeline (a 5 s tumbling
# count per customer over the records' timestamps) at 2k and 20k records/s, every window's count checked. Rewrites
# docs/BENCHMARKS-freshness.md and its plot (about 50 minutes; --freshness-rates, --freshness-windowed-rates,
# --freshness-seconds in `lockstep bench --help`). The first run sets up the peers in .cache/bench/.
bench-freshness: setup
	$(BIN)/lockstep bench --freshness-only --results var/bench/freshness-results.json --report docs/BENCHMARKS-freshness.md

up: setup
	$(BIN)/lockstep dev up --with airflow

down:
	$(BIN)/lockstep dev down

status:
	$(BIN)/lockstep dev status

clean:
	-$(BIN)/lockstep dev down --wipe
	rm -rf $(VENV) .cache var
