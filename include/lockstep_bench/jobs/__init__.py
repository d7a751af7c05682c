"""The benchmark's competitor jobs, each run as a script: Spark's own at-least-once pipeline through
spark-submit, the Flink SQL and Quix Streams peers with their own venvs' Python."""
