"""``lockstep bench``: exactly-once throughput against Spark's own Kafka pipeline and the raw client
ceiling, fixed cost, scaling, written to docs/BENCHMARKS.md. Modules: ``workloads`` (input topics,
specs), ``pipelines`` (the competitors), ``measure`` (process-tree sampling, stats), ``history``
(plan time vs past checkpoints), ``airflow_overhead``, ``results`` (the results model), ``runner``
(platform, alternation, sections), ``report`` + ``png``. A tool, not the engine: nothing in
``lockstep`` imports it."""
