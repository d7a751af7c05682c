"""Regression, found by the soak's ``s3_restart`` fault: S3 that closes the connection
without answering made the run step die with botocore's ConnectionClosedError and a traceback as the
task's last line. Unreachable S3 is a transient error naming the object, like a 503."""
from __future__ import annotations

import socket
import threading

import boto3
import pytest
from botocore.config import Config

from lockstep.errors import TransientError
from lockstep.store.checkpoint_store import CheckpointStore


def store_at(port: int) -> CheckpointStore:
    s3 = boto3.client("s3", endpoint_url=f"http://127.0.0.1:{port}", aws_access_key_id="k", aws_secret_access_key="s",
                      region_name="us-east-1", config=Config(retries={"max_attempts": 1, "mode": "standard"},
                                                             connect_timeout=2, read_timeout=2))
    return CheckpointStore(s3, "bucket", "checkpoints/p", "p")


@pytest.fixture
def closing_server():
    """Accepts every connection, reads the request and closes without a response (an S3 being killed)."""
    server = socket.create_server(("127.0.0.1", 0))

    def serve():
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            conn.recv(65536)
            conn.close()

    threading.Thread(target=serve, daemon=True).start()
    yield server.getsockname()[1]
    server.close()


def test_s3_restart_a_connection_closed_without_answer_is_transient_and_names_the_object(closing_server):
    with pytest.raises(TransientError, match=r"S3 is unreachable for checkpoints/p/checkpoints/000000000002/claim.json"):
        store_at(closing_server).view(2)


def test_s3_restart_a_refused_connection_is_transient():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        free = s.getsockname()[1]  # bound, never listening: connections are refused
        with pytest.raises(TransientError, match="S3 is unreachable"):
            list(store_at(free).checkpoint_ids())
