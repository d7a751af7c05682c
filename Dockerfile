# Airflow image for docker-compose.yaml: Airflow 3.3.2 (same pin as requirements.lock)
# plus Java 17 for Spark, the project's Python pins, the Spark Kafka connector jars
# and the lockstep library installed from include/.
#
#   docker compose build          # or: docker build -t lockstep-airflow:0.1.0 .
#
# Every Python pin below must equal requirements.lock (tests/dags/test_compose.py checks it).

# ---- stage 1: Spark Kafka connector jars, resolved from Maven Central -------------
# The same pom and settings as `make setup`, so the image and a laptop get the same jars.
FROM maven:3.9.9-eclipse-temurin-17 AS jars
COPY jvm/maven/ /build/maven/
RUN mvn -q -B -s /build/maven/settings.xml -f /build/maven/spark-kafka-pom.xml \
        dependency:copy-dependencies \
        -DoutputDirectory=/opt/lockstep/.cache/jars/spark-kafka -DincludeScope=runtime

# ---- stage 2: the Airflow image ---------------------------------------------------
FROM apache/airflow:3.3.2-python3.11

USER root
# Spark needs a JVM in every container that runs tasks (LocalExecutor: the scheduler);
# a JDK, because Lockstep's JVM writer is compiled against the image's own Spark jars.
# JAVA_HOME points at an arch-independent link (amd64 and arm64 hosts alike).
RUN apt-get update \
    && apt-get install -y --no-install-recommends openjdk-17-jdk-headless \
    && ln -sfn "$(dirname "$(dirname "$(readlink -f "$(command -v java)")")")" /usr/lib/jvm/lockstep-java \
    && apt-get autoremove -yqq --purge \
    && apt-get clean \
    && rm -rf /var/lib/apt/lists/* \
    && mkdir -p /opt/lockstep/dags /opt/lockstep/plugins /opt/lockstep/jobs /opt/lockstep/include \
                /opt/lockstep/.cache/jars /opt/airflow/auth \
    && chown -R airflow:0 /opt/lockstep /opt/airflow/auth
USER airflow

# lockstep.paths.project_root() reads LOCKSTEP_HOME: the jars are found under
# $LOCKSTEP_HOME/.cache/jars/spark-kafka (paths.spark_kafka_jars).
ENV LOCKSTEP_HOME=/opt/lockstep \
    JAVA_HOME=/usr/lib/jvm/lockstep-java

COPY --chown=airflow:0 pyproject.toml requirements.lock /opt/lockstep/

# Airflow is already in the image: install it pinned next to the extras so pip never
# moves it (the official way to extend the image), then the project's own pins.
# The spark provider's pyspark-client shares pyspark's Python files: reinstall full
# pyspark last, without dependencies, so its Python side matches its jars.
RUN pip install --no-cache-dir \
        "apache-airflow==3.3.2" \
        "apache-airflow-providers-amazon==9.39.0" \
        "apache-airflow-providers-apache-kafka==2.1.0" \
        "apache-airflow-providers-apache-spark==6.3.4" \
        "pyspark==4.0.0" \
        "pyspark-client==4.0.0" \
        "confluent-kafka==2.16.1" \
        "kafka-python==3.0.12" \
        "boto3>=1.40" \
        "pyyaml>=6" \
    && pip install --no-cache-dir --force-reinstall --no-deps "pyspark==4.0.0"

COPY --from=jars --chown=airflow:0 /opt/lockstep/.cache/jars/spark-kafka /opt/lockstep/.cache/jars/spark-kafka

# The library, editable so that docker-compose.yaml can mount ./include over it.
# --no-deps: everything it needs is installed above; pip must not touch pyspark again.
# Then Lockstep's JVM writer (sink.writer: jvm), built by the same script as `make setup`; given no
# JUnit folder, the script skips the writer's unit tests, which `make setup` runs on these sources.
COPY --chown=airflow:0 include/ /opt/lockstep/include/
COPY --chown=airflow:0 jvm/ /opt/lockstep/jvm/
RUN pip install --no-cache-dir --no-deps -e /opt/lockstep
RUN bash /opt/lockstep/jvm/build-jvm-writer.sh python /opt/lockstep/.cache/jars/spark-kafka \
        /opt/lockstep/.cache/jars/lockstep/lockstep-jvm-writer.jar \
    && python -c "from lockstep.spark.conf import spark_conf; print(spark_conf()['spark.jars'])" \
    && java -version

WORKDIR /opt/airflow
