"""What Lockstep's processes log: their own lines at INFO, the client libraries' only from WARNING; and
never a credential that a URL carries (`redact_urls`).

A task log, the CLI's output and a spark-submit driver's output should read as the checkpoint's
story (its ranges, counts, timings), not as the connection chatter of the clients it uses.
"""
from __future__ import annotations

__all__ = [
    "RedactingFilter",
    "quiet_clients",
    "redact_urls",
]

import logging
import os
import re

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


#: What stands in for a credential in a logged URL.
REDACTED = "***"
#: The user information of a URL (``https://user:password@host``): everything between ``//`` and ``@``.
_USERINFO = re.compile(r"(?i)(\b[a-z][a-z0-9+.-]*://)[^/\s?#]+@")
#: A parameter whose name says it is a credential, in a query (``?token=``, ``&X-Amz-Signature=``) or among
#: ``;`` parameters (a Spark Connect URL's ``;token=``); the value runs to the next separator.
_CREDENTIAL_PARAM = re.compile(
    r"(?i)([?&;][^=&;?#\s]*(?:pass|pwd|secret|token|key|auth|credential|signature|sig\b|session)[^=&;?#\s]*=)"
    r"[^&;#\s'\")]+")


def redact_urls(text: str) -> str:
    """``text`` (a URL, or a message or exception text holding some) with the user information of every URL
    and the values of credential-like parameters (password, token, key, secret, auth, signature, session,
    ...) replaced by ``***``: what Lockstep logs of an endpoint, a registry, a server (an OTLP endpoint
    ``https://user:pass@host/...`` included). Host, port and path stay, so the line still says where."""
    return _CREDENTIAL_PARAM.sub(rf"\g<1>{REDACTED}", _USERINFO.sub(rf"\g<1>{REDACTED}@", text))


class RedactingFilter(logging.Filter):
    """A logging filter that passes a record's message through `redact_urls`: for a client library's logger that
    may log the URL it was given (OpenTelemetry's exporter logs the error of a failed request, its URL's query with it)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        redacted = redact_urls(message)
        if redacted != message:
            record.msg, record.args = redacted, None
        return True
