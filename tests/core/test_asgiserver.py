"""uvicorn's transport as the portal's server uses it (apps.core.asgiserver). Every
server the suite starts (tests.support.servers) runs with these options, so the
proxy's streaming, WebSocket and upload tests run over it too."""

from __future__ import annotations

import asyncio
import socket

from apps.core.asgiserver import _CorkedTransport


class _Upstream(asyncio.Protocol):
    """The server side of a real loopback connection, reading what uvicorn's protocol wrote."""

    def __init__(self):
        self.reads: list[bytes] = []

    def data_received(self, data: bytes) -> None:
        self.reads.append(data)


async def _corked_pair():
    """A corked transport over a real socket pair, and what the other end receives."""
    loop = asyncio.get_running_loop()
    ours, theirs = socket.socketpair()
    transport, _ = await loop.create_connection(asyncio.Protocol, sock=ours)
    peer = _Upstream()
    await loop.create_connection(lambda: peer, sock=theirs)
    return _CorkedTransport(transport, loop), peer


def test_the_writes_of_one_turn_leave_in_one_send_and_later_ones_follow():
    async def run():
        corked, peer = await _corked_pair()
        corked.write(b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\n")
        corked.write(b"hello")
        assert corked.get_write_buffer_size() == 43  # held, not lost
        await asyncio.sleep(0.05)
        first = list(peer.reads)
        corked.write(b"next")
        await asyncio.sleep(0.05)
        corked.write(b" and the last")
        corked.close()  # whatever is held goes out before the close
        await asyncio.sleep(0.05)
        return first, peer.reads

    first, reads = asyncio.run(run())
    assert first == [b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello"]
    assert b"".join(reads) == b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhellonext and the last"


def test_abort_drops_what_is_held():
    async def run():
        corked, peer = await _corked_pair()
        corked.write(b"never sent")
        corked.abort()
        await asyncio.sleep(0.05)
        return peer.reads

    assert asyncio.run(run()) == []
