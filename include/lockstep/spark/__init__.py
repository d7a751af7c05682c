"""The Spark side of a checkpoint: where the run goes (submit or connect), the settings every run
needs, the job that reads the claimed ranges and pre-commits, the Python writer, and dead-letter
replay as a mode of the job."""
