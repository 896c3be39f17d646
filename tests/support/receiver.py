"""A local HTTP receiver for outbound webhooks: records what arrives, can fail first,
and, given the shared secret, verifies signatures as a receiver should (refusing
bad signatures and stale timestamps with 401)."""

from __future__ import annotations

import hashlib
import hmac
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

TOLERANCE_SECONDS = 300
# What the platform and the test receiver (CCP) share to sign and check webhooks.
WEBHOOK_SECRET = "ccp-shared-secret"


def signature_valid(secret: str, headers, body: bytes, *, now: float | None = None) -> bool:
    """What docs/api-guide.md tells CCP to do: ``X-GPUaaS-Signature`` is the HMAC of the
    body (CONTRACT.md); ``X-GPUaaS-Timestamp-Signature`` that of the timestamp and the
    body, with the timestamp fresh."""
    timestamp = headers.get("X-GPUaaS-Timestamp", "")
    if not timestamp.isdigit():
        return False
    if abs((time.time() if now is None else now) - int(timestamp)) > TOLERANCE_SECONDS:
        return False
    expected = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    stamped = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(headers.get("X-GPUaaS-Signature", ""), f"sha256={expected}") and (
        hmac.compare_digest(headers.get("X-GPUaaS-Timestamp-Signature", ""), f"sha256={stamped}")
    )


class WebhookReceiver:
    def __init__(
        self,
        fail_first: int = 0,
        status: int = 500,
        secret: str | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
    ):
        self.requests: list[dict] = []
        self.fail_first = fail_first
        self.status = status
        self.secret = secret
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                verified = receiver.secret is None or signature_valid(receiver.secret, self.headers, body)
                receiver.requests.append(
                    {"path": self.path, "headers": dict(self.headers), "body": body, "verified": verified}
                )
                failing = len(receiver.requests) <= receiver.fail_first
                self.send_response(401 if not verified else receiver.status if failing else 204)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer((host, port), Handler)
        # A short poll interval: close() (shutdown) returns in ~50 ms instead of 500 ms,
        # which every test with a receiver waited in its teardown.
        threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        ).start()
        self.port = self.server.server_address[1]
        self.url = f"http://{host}:{self.port}"

    def close(self):
        self.server.shutdown()
        self.server.server_close()


class DrippingReceiver:
    """A receiver that never finishes answering: after the request it sends its answer's
    status line and ``drip`` (``"headers"``: header bytes; ``"body"``: body bytes of a
    promised gigabyte) one byte every ``every`` seconds, each soon enough to keep a
    per-read timeout from firing, until the platform hangs up."""

    def __init__(self, drip: str, every: float = 0.05):
        self.drip, self.every = drip, every
        self.requests = 0
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn):
        with conn:
            conn.recv(65536)
            self.requests += 1
            head = b"HTTP/1.1 200 OK\r\n"
            head += b"X-Slow: " if self.drip == "headers" else b"Content-Length: 1000000000\r\n\r\n"
            try:
                conn.sendall(head)
                while True:
                    time.sleep(self.every)
                    conn.sendall(b"a")
            except OSError:
                return  # the platform hung up

    def close(self):
        self.listener.close()
