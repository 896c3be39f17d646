"""How uvicorn serves the portal and the proxy: ``manage.py serve`` and the test
servers use the same options, so the tests run what production runs."""

from __future__ import annotations

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol


class _CorkedTransport:
    """A transport whose writes of one event-loop turn leave together.

    uvicorn writes a response's head as soon as the app sends it, and the body in a
    second write: two system calls, and two loopback deliveries, for every small
    response. Held until the end of the turn (the app sends the body in the same
    turn when it has it), they leave in one. A streamed body is not held back: each
    turn's writes go out at its end.
    """

    __slots__ = ("_transport", "_loop", "_pending")

    def __init__(self, transport, loop):
        self._transport, self._loop, self._pending = transport, loop, []

    def write(self, data) -> None:
        if not self._pending:
            self._loop.call_soon(self._flush)
        self._pending.append(data)

    def writelines(self, lines) -> None:
        for data in lines:
            self.write(data)

    def _flush(self) -> None:
        pending = self._pending
        if not pending:
            return
        data = pending[0] if len(pending) == 1 else b"".join(pending)
        pending.clear()
        if not self._transport.is_closing():
            self._transport.write(data)

    def get_write_buffer_size(self) -> int:
        return self._transport.get_write_buffer_size() + sum(len(data) for data in self._pending)

    def write_eof(self) -> None:
        self._flush()
        self._transport.write_eof()

    def close(self) -> None:
        self._flush()
        self._transport.close()

    def abort(self) -> None:
        self._pending.clear()
        self._transport.abort()

    def __getattr__(self, name):
        # Everything else (is_closing, pause_reading, set_protocol, get_extra_info, ...).
        return getattr(self._transport, name)


class HttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol on a corked transport (a WebSocket upgraded from
    it keeps the corked transport too)."""

    def connection_made(self, transport) -> None:
        super().connection_made(_CorkedTransport(transport, self.loop))


# The largest WebSocket message a browser may send (uvicorn closes with 1009 beyond)
# and, in the proxy, that an app may send: a message is held whole before it is
# relayed. Jupyter's own server takes 10 MiB at most.
WEBSOCKET_MAX_MESSAGE_BYTES = 16 * 1024 * 1024

OPTIONS = {
    "http": HttpProtocol,
    "ws": "websockets-sansio",  # supports the WebSocket denial response the proxy sends
    "ws_max_size": WEBSOCKET_MAX_MESSAGE_BYTES,
    "log_config": None,  # Django's LOGGING configures logging
    "access_log": False,  # the portal and the proxy write their own access lines
    "lifespan": "off",
}
