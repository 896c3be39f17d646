"""Real servers for tests: the portal's ASGI app under uvicorn in a thread."""

from __future__ import annotations

import asyncio
import json
import threading
import time

import uvicorn
from channels.layers import channel_layers

from apps.core import asgiserver
from tests.support.processes import free_port


def reply_json(handler, status: int, body=None) -> None:
    """A JSON answer (or an empty one) from a ``BaseHTTPRequestHandler`` of a fake server."""
    payload = json.dumps(body).encode() if body is not None else b""
    handler.send_response(status)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(payload)))
    handler.end_headers()
    handler.wfile.write(payload)


class ThreadedUvicorn:
    def __init__(
        self, app: str = "gpuaas.asgi:application", host: str = "127.0.0.1", port: int | None = None
    ):
        self.host = host
        self.port = port or free_port()
        config = uvicorn.Config(app, host=host, port=self.port, **asgiserver.OPTIONS)
        self.server = uvicorn.Server(config)
        self.server.install_signal_handlers = lambda: None  # not the main thread
        self.thread = threading.Thread(target=self.server.run, name=f"uvicorn-{self.port}", daemon=True)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> ThreadedUvicorn:
        # A channel layer receives on the event loop that first used it: give each
        # server its own, so one stopped earlier (with receives pending) is not in the way.
        channel_layers.backends.clear()
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.05)
        return self

    def busy(self) -> tuple[int, int]:
        """Open connections and running tasks (the server's own aside) on the server's loop."""

        async def others() -> int:
            return len(asyncio.all_tasks()) - 2  # this one and uvicorn's serve()

        loop = self.server.servers[0].get_loop()
        tasks = asyncio.run_coroutine_threadsafe(others(), loop).result(timeout=10)
        return len(self.server.server_state.connections), tasks

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
