"""An app behind the platform proxy, for the data plane's tests.

A plain ASGI app that serves the same endpoints under any prefix (it looks at the
last path segment), run by ``python -m tests.support.upstream PORT`` in its own
process so that large transfers do not share the test process's GIL. State a
test needs to read back (a client that went away, a WebSocket close code) is
kept here and read with direct requests that do not pass through the proxy.
"""

from __future__ import annotations

import asyncio
import gzip
import hashlib
import json
import struct
import sys
import zlib
from collections.abc import Awaitable, Callable
from urllib.parse import parse_qs

import uvicorn

_released: dict[str, asyncio.Event] = {}
_disconnected: set[str] = set()
_ws_closed: dict[str, dict] = {}
_MEGABYTE = b"x" * (1024 * 1024)
_bombs: dict[int, bytes] = {}


def _query(scope) -> dict[str, str]:
    return {key: values[0] for key, values in parse_qs(scope["query_string"].decode()).items()}


def _header(scope, name: bytes) -> str:
    for key, value in scope["headers"]:
        if key == name:
            return value.decode("latin-1")
    return ""


def _directory(scope) -> str:
    return scope["path"].rsplit("/", 1)[0] + "/"


def _token(scope) -> str:
    return _header(scope, b"authorization").removeprefix("token ")


async def _respond(send, status=200, body=b"", headers=(), content_type=b"application/json"):
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", content_type),
                (b"content-length", str(len(body)).encode()),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def _json(send, data, status=200, headers=()):
    await _respond(send, status, json.dumps(data).encode(), headers)


async def _read_body(receive) -> tuple[bytes, int]:
    """The first KiB of the body (to echo) and its full length."""
    head, size = b"", 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return head, size
        chunk = message.get("body", b"")
        size += len(chunk)
        if len(head) < 1024:
            head += chunk[: 1024 - len(head)]
        if not message.get("more_body"):
            return head, size


def _bomb(megabytes: int) -> bytes:
    """A small gzip body that inflates to ``megabytes`` of zeros (made once). A megabyte
    of zeros deflated and fully flushed is a block that stands alone, so the body repeats
    it rather than deflating them all (300 MB took the app 0.9 CPU-s)."""
    if megabytes not in _bombs:
        zeros = bytes(1024 * 1024)
        packer = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
        block = packer.compress(zeros) + packer.flush(zlib.Z_FULL_FLUSH)
        crc = 0
        for _ in range(megabytes):
            crc = zlib.crc32(zeros, crc)
        header = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff"  # gzip, deflate, no name or time
        trailer = struct.pack("<II", crc, megabytes * len(zeros) & 0xFFFFFFFF)
        _bombs[megabytes] = header + block * megabytes + packer.flush() + trailer
    return _bombs[megabytes]


def _lab_page(scope) -> bytes:
    config = {"baseUrl": _directory(scope), "token": _token(scope), "appVersion": "4.2.0"}
    filler = "<!-- " + "padding " * 2000 + "-->"
    return (
        f'<!doctype html><html><head>{filler}<script id="jupyter-config-data" type="application/json">'
        f"{json.dumps(config)}</script></head><body>JupyterLab</body></html>"
    ).encode()


_ENDPOINTS: dict[str, Callable[..., Awaitable[None]]] = {}


def _endpoint(name: str):
    """Serve the decorated ``handler(scope, receive, send, query)`` at paths ending in ``name``."""

    def register(handler):
        _ENDPOINTS[name] = handler
        return handler

    return register


async def http_app(scope, receive, send):
    name = scope["path"].rsplit("/", 1)[-1]
    await _ENDPOINTS.get(name, _echo)(scope, receive, send, _query(scope))


@_endpoint("redirect")
async def _redirect(scope, receive, send, query):
    where = {
        "absolute": f"http://{_header(scope, b'host')}{_directory(scope)}landing?from=redirect",
        "relative": f"{_directory(scope)}landing",
        "root": "/landing",
        "elsewhere": "https://example.org/docs",
    }[query.get("to", "relative")]
    await _respond(send, 302, headers=[(b"location", where.encode())])


@_endpoint("cookies")
async def _cookies(scope, receive, send, query):
    cookies = [
        f"app=1; Domain=upstream.example; Path={_directory(scope)}; HttpOnly",
        "rooted=2; Path=/; SameSite=Lax",
        "plain=3",
        "sessionid=planted; Path=/",
    ]
    await _respond(send, headers=[(b"set-cookie", c.encode()) for c in cookies])


@_endpoint("headers")
async def _headers(scope, receive, send, query):
    await _respond(
        send,
        headers=[
            (b"connection", b"x-hop"),
            (b"x-hop", b"1"),
            (b"keep-alive", b"timeout=5"),
            (b"x-fine", b"ok"),
            (b"x-echo-token", f"token={_token(scope)}".encode()),
            (b"content-security-policy", b"default-src 'self'; frame-ancestors *"),
            (b"x-frame-options", b"SAMEORIGIN"),
        ],
    )


@_endpoint("nocsp")
async def _nocsp(scope, receive, send, query):
    await _respond(send, body=b"{}")


@_endpoint("sse")
async def _sse(scope, receive, send, query):
    event = _released.setdefault(query["id"], asyncio.Event())
    start = {
        "type": "http.response.start",
        "status": 200,
        "headers": [(b"content-type", b"text/event-stream")],
    }
    await send(start)
    await send({"type": "http.response.body", "body": b"data: one\n\n", "more_body": True})
    await event.wait()  # the test releases the second event once it has seen the first
    await send({"type": "http.response.body", "body": b"data: two\n\n"})


@_endpoint("release")
async def _release(scope, receive, send, query):
    _released.setdefault(query["id"], asyncio.Event()).set()
    await _json(send, {"released": query["id"]})


@_endpoint("download")
async def _download(scope, receive, send, query):
    size = int(query["n"])
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [
                (b"content-type", b"application/octet-stream"),
                (b"content-length", str(size).encode()),
            ],
        }
    )
    while size > 0:
        chunk = _MEGABYTE[: min(size, len(_MEGABYTE))]
        size -= len(chunk)
        await send({"type": "http.response.body", "body": chunk, "more_body": size > 0})


@_endpoint("upload")
async def _upload(scope, receive, send, query):
    _, size = await _read_body(receive)
    await _json(send, {"bytes": size})


@_endpoint("slow")
async def _slow(scope, receive, send, query):
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": b"waiting\n", "more_body": True})
    while (await receive())["type"] != "http.disconnect":
        pass
    _disconnected.add(query["id"])


@_endpoint("disconnected")
async def _was_disconnected(scope, receive, send, query):
    await _json(send, {"disconnected": query["id"] in _disconnected})


@_endpoint("ws-closed")
async def _ws_was_closed(scope, receive, send, query):
    await _json(send, _ws_closed.get(query["id"], {}))


@_endpoint("lab")
async def _lab(scope, receive, send, query):
    if _header(scope, b"range"):
        await _lab_part(scope, send)
    else:
        await _lab_whole(scope, send)


async def _lab_part(scope, send):
    # A part of the page, as a static file server sends one: bytes=first-last,
    # first- or -suffix (one range; the proxies never ask for more).
    first, last = _header(scope, b"range").removeprefix("bytes=").split("-")
    page = _lab_page(scope)
    if first:
        first, last = int(first), min(int(last or len(page) - 1), len(page) - 1)
    else:
        first, last = max(0, len(page) - int(last)), len(page) - 1
    if first >= len(page):
        await _respond(send, 416, b"", [(b"content-range", f"bytes */{len(page)}".encode())], b"text/html")
    else:
        part = f"bytes {first}-{last}/{len(page)}".encode()
        await _respond(send, 206, page[first : last + 1], [(b"content-range", part)], b"text/html")


async def _lab_whole(scope, send):
    page = _lab_page(scope)
    headers = [(b"content-type", b"text/html"), (b"content-length", str(len(page)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    # Small pieces, so the token straddles the proxy's reads, and a pause in its middle.
    token = _token(scope).encode()
    middle = page.find(token) + len(token) // 2 if token else -1
    for offset in range(0, len(page), 7):
        await send({"type": "http.response.body", "body": page[offset : offset + 7], "more_body": True})
        if offset <= middle < offset + 7:
            await asyncio.sleep(0.05)
        elif offset % 700 == 0:
            await asyncio.sleep(0)
    await send({"type": "http.response.body", "body": b""})


@_endpoint("wrong-part")
async def _wrong_part(scope, receive, send, query):
    # An app that answers a Range with another part than the one asked for (letters no
    # hex id on the error page can hold).
    await _respond(send, 206, b"WXYZ", [(b"content-range", b"bytes 0-3/100")], b"text/plain")


@_endpoint("big-part")
async def _big_part(scope, receive, send, query):
    # The asked part (one range, first-) of a large file, in the app's own small writes.
    total = int(query["mb"]) * 1024 * 1024
    first = int(_header(scope, b"range").removeprefix("bytes=").split("-")[0])
    headers = [
        (b"content-type", b"application/octet-stream"),
        (b"content-range", f"bytes {first}-{total - 1}/{total}".encode()),
        (b"content-length", str(total - first).encode()),
    ]
    await send({"type": "http.response.start", "status": 206, "headers": headers})
    chunk = b"z" * 65536
    for offset in range(first, total, len(chunk)):
        await send({"type": "http.response.body", "body": chunk[: total - offset], "more_body": True})
    await send({"type": "http.response.body", "body": b""})


@_endpoint("lab-gzip")
async def _lab_gzip(scope, receive, send, query):
    # An app that compresses although the proxy asked for identity.
    await _respond(
        send,
        body=gzip.compress(_lab_page(scope)),
        headers=[(b"content-encoding", b"gzip")],
        content_type=b"text/html; charset=utf-8",
    )


@_endpoint("die")
async def _die(scope, receive, send, query):
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [(b"content-type", b"text/plain"), (b"content-length", b"1000")],
        }
    )
    await send({"type": "http.response.body", "body": b"partial", "more_body": True})
    raise RuntimeError("the app crashes mid-response")


# --- a hostile app ------------------------------------------------------------------


@_endpoint("goto")
async def _goto(scope, receive, send, query):
    # Redirects wherever it is told: an app that reflects a ``next`` parameter.
    await _respond(send, 302, headers=[(b"location", query["location"].encode("latin-1"))])


@_endpoint("powerful-headers")
async def _powerful_headers(scope, receive, send, query):
    await _respond(
        send,
        body=b"{}",
        headers=[
            (b"service-worker-allowed", b"/"),
            (b"clear-site-data", b'"cookies", "storage"'),
            (b"x-leak", f"token {_token(scope)}".encode()),
            (b"x-fine", b"ok"),
        ],
    )


@_endpoint("sw.js")
async def _service_worker(scope, receive, send, query):
    # A worker that would answer for the whole origin, the portal's pages included.
    await _respond(
        send,
        body=b"self.onfetch = () => {};",
        headers=[(b"service-worker-allowed", b"/")],
        content_type=b"text/javascript",
    )


@_endpoint("page.html")
async def _page(scope, receive, send, query):
    await _respond(send, body=b"<!doctype html><title>an app</title>", content_type=b"text/html")


@_endpoint("typed")
async def _typed(scope, receive, send, query):
    # The token in a body of any type (an image's metadata, a file download, ...).
    body = b"\x89PNG\r\n\x1a\n" + _token(scope).encode() + b"\x00\x01"
    content_type = query.get("type", "").encode()
    await _respond(send, body=body, content_type=content_type)


@_endpoint("encoded")
async def _encoded(scope, receive, send, query):
    # The page compressed, with its coding written in one or several headers.
    codings = [(b"content-encoding", coding.encode()) for coding in query["codings"].split(",")]
    await _respond(send, body=gzip.compress(_lab_page(scope)), headers=codings, content_type=b"text/html")


@_endpoint("bomb")
async def _gzip_bomb(scope, receive, send, query):
    await _respond(
        send,
        body=_bomb(int(query["mb"])),
        headers=[(b"content-encoding", b"gzip")],
        content_type=b"text/html; charset=utf-8",
    )


@_endpoint("many-headers")
async def _many_headers(scope, receive, send, query):
    many = [(b"x-h-%d" % i, b"v") for i in range(int(query["n"]))]
    await _respond(send, body=b"{}", headers=many)


@_endpoint("huge-header")
async def _huge_header(scope, receive, send, query):
    await _respond(send, body=b"{}", headers=[(b"x-huge", b"h" * int(query["bytes"]))])


@_endpoint("status")
async def _status(scope, receive, send, query):
    await _json(send, {"status": int(query["code"])}, status=int(query["code"]))


async def _echo(scope, receive, send, query):
    """Any other path: the request as the app got it."""
    head, size = await _read_body(receive)
    headers = [[key.decode("latin-1"), value.decode("latin-1")] for key, value in scope["headers"]]
    await _json(
        send,
        {
            "method": scope["method"],
            "path": scope["path"],
            "raw_path": scope["raw_path"].decode("latin-1"),
            "query": scope["query_string"].decode("latin-1"),
            "headers": headers,
            "digests": {key: hashlib.sha256(value.encode()).hexdigest() for key, value in headers},
            "body": head.decode("latin-1"),
            "body_bytes": size,
        },
    )


async def websocket_app(scope, receive, send):
    ident = _query(scope).get("id", "")
    await receive()  # websocket.connect
    if scope["path"].endswith("/refuse"):
        await send({"type": "websocket.close", "code": 1008})
        return
    offered = scope.get("subprotocols") or []
    await send({"type": "websocket.accept", "subprotocol": offered[-1] if offered else None})
    while True:
        message = await receive()
        if message["type"] == "websocket.disconnect":
            _ws_closed[ident] = {"code": message.get("code"), "reason": message.get("reason") or ""}
            return
        text = message.get("text")
        if text is None:
            await send({"type": "websocket.send", "bytes": message["bytes"]})
        elif text.startswith("close:"):
            _, code, reason = text.split(":", 2)
            await send({"type": "websocket.close", "code": int(code), "reason": reason})
            return
        elif text == "close-with-token":
            await send({"type": "websocket.close", "code": 4001, "reason": f"token {_token(scope)}"})
            return
        elif text.startswith("big:"):
            await send({"type": "websocket.send", "bytes": bytes(int(text[4:]))})
        elif text == "path":
            path = {"path": scope["path"], "raw_path": scope["raw_path"].decode("latin-1")}
            await send({"type": "websocket.send", "text": json.dumps(path)})
        elif text == "headers":
            headers = {key.decode("latin-1"): value.decode("latin-1") for key, value in scope["headers"]}
            await send({"type": "websocket.send", "text": json.dumps(headers)})
        else:
            await send({"type": "websocket.send", "text": text})


async def app(scope, receive, send):
    if scope["type"] == "http":
        await http_app(scope, receive, send)
    elif scope["type"] == "websocket":
        await websocket_app(scope, receive, send)


if __name__ == "__main__":
    uvicorn.run(
        app,
        host="127.0.0.1",
        port=int(sys.argv[1]),
        log_level="warning",
        lifespan="off",
        ws="websockets-sansio",
        ws_max_size=64 * 1024 * 1024,
    )
