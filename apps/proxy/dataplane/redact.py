"""Streaming masking of secrets in response bodies and messages.

JupyterLab writes its token into every page it serves (``"token": "<t>"`` in the
page config, DESIGN.md field notes); with a header-injecting auth bridge that
token must be masked before the page reaches the browser. A secret becomes as many
``x`` (decision 0023): the body keeps its length, so the app's ``Content-Length``
holds (unless a compressed body has to be decoded first; nginx masks the same way).
A secret can straddle two chunks, so a chunk's end that could be the start of a
secret waits for the next chunk; anything else goes on at once, so event streams
are not held back.
"""

from __future__ import annotations

import zlib


class Undecodable(Exception):
    """A body in a content encoding the redactor cannot read (so it cannot be inspected)."""


class Redactor:
    __slots__ = ("secrets", "tail", "decoder")

    def __init__(self, secrets: tuple[bytes, ...], encoding: bytes = b""):
        self.secrets = secrets
        self.tail = b""
        # The proxy asks for identity encoding; an app that compresses anyway is decoded.
        if encoding in (b"", b"identity"):
            self.decoder = None
        elif encoding in (b"gzip", b"x-gzip", b"deflate"):
            self.decoder = zlib.decompressobj(zlib.MAX_WBITS | 32)  # gzip or zlib header
        else:
            raise Undecodable(encoding.decode("latin-1"))

    def feed(self, chunk: bytes) -> bytes:
        if self.decoder is not None:
            chunk = self.decoder.decompress(chunk)
        data = self._scrub(self.tail + chunk)
        held = self._held(data)
        self.tail = data[len(data) - held :] if held else b""
        return data[: len(data) - held]

    def flush(self) -> bytes:
        rest = self.decoder.flush() if self.decoder is not None else b""
        data, self.tail = self._scrub(self.tail + rest), b""
        return data

    def flush_all(self, data: bytes) -> bytes:
        """A whole body (or message) at once."""
        return self.feed(data) + self.flush()

    def _scrub(self, data: bytes) -> bytes:
        for secret in self.secrets:
            data = data.replace(secret, b"x" * len(secret))
        return data

    def _held(self, data: bytes) -> int:
        """How many bytes at the end of ``data`` could be the beginning of a secret."""
        held = 0
        for secret in self.secrets:
            first = secret[:1]
            at = data.find(first, max(0, len(data) - len(secret) + 1))
            while at != -1:
                if secret.startswith(data[at:]):
                    held = max(held, len(data) - at)
                    break
                at = data.find(first, at + 1)
        return held
