"""Streaming masking of secrets in response bodies and messages.

JupyterLab writes its token into every page it serves (``"token": "<t>"`` in the
page config, DESIGN.md field notes); with a header-injecting auth bridge that
token must be masked before the page reaches the browser. A secret becomes as many
``x`` (decision 0023): the body keeps its length, so the app's ``Content-Length``
holds (nginx masks the same way). Every body of such a route is masked, whatever its
type: script on the route can read any of them. A compressed body is never inflated
here (a few hundred KB of gzip can be hundreds of MB): the proxy asks for identity and
refuses an encoded answer (``http.py``, decision 0029).
A secret can straddle two chunks, so a chunk's end that could be the start of a
secret waits for the next chunk; anything else goes on at once, so event streams
are not held back.
"""

from __future__ import annotations


class Redactor:
    __slots__ = ("secrets", "tail")

    def __init__(self, secrets: tuple[bytes, ...]):
        self.secrets = secrets
        self.tail = b""

    def feed(self, chunk: bytes) -> bytes:
        data = self._scrub(self.tail + chunk)
        held = self._held(data)
        self.tail = data[len(data) - held :] if held else b""
        return data[: len(data) - held]

    def flush(self) -> bytes:
        data, self.tail = self._scrub(self.tail), b""
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
