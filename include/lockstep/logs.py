"""What Lockstep's processes log: their own lines at INFO, the client libraries' only from WARNING.

A task log, the CLI's output and a spark-submit driver's output should read as the checkpoint's
story (its ranges, counts, timings), not as the connection chatter of the clients it uses.
"""
from __future__ import annotations

__all__ = [
    "quiet_clients",
]

import logging
import os

#: Loggers of client libraries that log routine connections at INFO: kafka-python (every broker
#: connection), py4j (every gateway connection of a spark-submit driver), botocore (where it found
#: credentials), and pyspark's Connect client.
CLIENT_LOGGERS = ("kafka", "py4j", "botocore", "urllib3", "pyspark")

#: Sets the level of the client loggers instead (``INFO`` or ``DEBUG`` when chasing a client problem).
LEVEL_ENV = "LOCKSTEP_CLIENT_LOG_LEVEL"


def quiet_clients() -> None:
    level = os.environ.get(LEVEL_ENV) or "WARNING"
    for name in CLIENT_LOGGERS:
        logging.getLogger(name).setLevel(level)
