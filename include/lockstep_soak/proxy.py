"""A fault-injecting TCP proxy in front of the S3 server: pass bytes through, delay every request,
or answer ``503 Slow Down`` to every new request and drop the open connections.

It works on connections, not on parsed HTTP: ``slow`` holds each chunk a client sends (every
request is held once) and ``errors`` reads a request's head, answers 503 with S3's XML error body
and closes, as an overloaded S3 front end does. Switching into a fault mode closes the connections
that are open, so clients that keep connections alive meet the fault on their next request.
"""
from __future__ import annotations

import socket
import threading
import time

PASS, SLOW, ERRORS = "pass", "slow", "errors"

_503 = (b"HTTP/1.1 503 Slow Down\r\nContent-Type: application/xml\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s")
_BODY = (b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>SlowDown</Code>'
         b"<Message>Please reduce your request rate. (lockstep soak fault proxy)</Message></Error>")


class FaultProxy:
    def __init__(self, upstream_port: int, upstream_host: str = "127.0.0.1", delay_s: float = 1.5) -> None:
        self.upstream = (upstream_host, upstream_port)
        self.delay_s = delay_s
        self.mode = PASS
        self.requests = {PASS: 0, SLOW: 0, ERRORS: 0}
        self._lock = threading.Lock()
        self._conns: set[socket.socket] = set()
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port = self._server.getsockname()[1]
        self._stopped = False
        threading.Thread(target=self._accept, name="s3-fault-proxy", daemon=True).start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def set_mode(self, mode: str) -> None:
        assert mode in (PASS, SLOW, ERRORS), mode
        self.mode = mode
        if mode != PASS:
            self._drop_all()

    def close(self) -> None:
        self._stopped = True
        try:
            self._server.close()
        finally:
            self._drop_all()

    # ---- internals -------------------------------------------------------------------------------
    def _drop_all(self) -> None:
        with self._lock:
            conns, self._conns = list(self._conns), set()
        for conn in conns:
            _close(conn)

    def _track(self, *socks: socket.socket) -> None:
        with self._lock:
            self._conns.update(socks)

    def _accept(self) -> None:
        while not self._stopped:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        mode = self.mode
        self._count(mode)
        if mode == ERRORS:
            self._answer_503(client)
            return
        try:
            upstream = socket.create_connection(self.upstream, timeout=10)
        except OSError:
            _close(client)  # the S3 server is down: the client sees a refused/closed connection
            return
        upstream.settimeout(None)
        self._track(client, upstream)
        threading.Thread(target=self._pump, args=(upstream, client, False), daemon=True).start()
        self._pump(client, upstream, True)

    def _count(self, mode: str) -> None:
        with self._lock:
            self.requests[mode] += 1

    def _answer_503(self, client: socket.socket) -> None:
        try:
            client.settimeout(5)
            head = b""
            while b"\r\n\r\n" not in head and len(head) < 65536:
                chunk = client.recv(4096)
                if not chunk:
                    break
                head += chunk
            client.sendall(_503 % (len(_BODY), _BODY))
        except OSError:
            pass
        finally:
            _close(client)

    def _pump(self, src: socket.socket, dst: socket.socket, from_client: bool) -> None:
        try:
            while True:
                chunk = src.recv(65536)
                if not chunk:
                    break
                if from_client:
                    mode = self.mode
                    if mode == SLOW:
                        self._count(SLOW)
                        time.sleep(self.delay_s)
                    elif mode == ERRORS:
                        break  # the connection was open when S3 started failing: drop it
                dst.sendall(chunk)
        except OSError:
            pass
        finally:
            _close(src)
            _close(dst)


def _close(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    try:
        sock.close()
    except OSError:
        pass
