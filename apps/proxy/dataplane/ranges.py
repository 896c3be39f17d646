"""A part of a response (``Range``) on a route with a secret to mask (decision 0023).

The mask recognizes whole secrets only, so a part the app cuts could hold a piece of
one. The app is asked for the part widened by a secret's length less one on each
side: every secret that reaches into the asked part is then whole in what the app
sends, is masked there, and the proxy cuts the masked bytes down to the asked part
(masking keeps lengths, so offsets hold). One range only, which is what a resumed
download or a seeking video asks for; several ranges, or anything unreadable, and the
app is asked for the whole body (a 200, which HTTP allows). nginx does the same
(docker/nginx/gpuaas.lua).
"""

from __future__ import annotations

import re

_RANGE = re.compile(rb"\s*bytes\s*=\s*(\d*)\s*-\s*(\d*)\s*", re.I)
_CONTENT_RANGE = re.compile(rb"\s*bytes\s+(\d+)-(\d+)/(\d+|\*)\s*", re.I)


class Asked:
    """The browser's one range: ``first-last``, ``first-`` (``last`` None), or the
    last ``suffix`` bytes (``first`` None)."""

    __slots__ = ("first", "last", "suffix")

    def __init__(self, first: int | None, last: int | None, suffix: int | None):
        self.first, self.last, self.suffix = first, last, suffix

    def widened(self, margin: int) -> bytes:
        """The Range header the app gets."""
        if self.first is None:
            return b"bytes=-%d" % (self.suffix + margin)
        start = max(0, self.first - margin)
        if self.last is None:
            return b"bytes=%d-" % start
        return b"bytes=%d-%d" % (start, self.last + margin)


def asked(value: bytes) -> Asked | None:
    """The browser's Range header, when it asks for one range of bytes."""
    match = _RANGE.fullmatch(value)
    if match is None:
        return None
    first, last = match.group(1), match.group(2)
    if first:
        if last and int(last) < int(first):
            return None
        return Asked(int(first), int(last) if last else None, None)
    if last and int(last) > 0:
        return Asked(None, None, int(last))
    return None


class Unsatisfiable(Exception):
    """The asked range starts past the end of the body: 416, with the body's length."""

    def __init__(self, total: bytes):
        self.total = total


class Unreadable(Exception):
    """The app's part is not the widened one it was asked for."""


class Cut:
    """The asked part of the app's widened one: its headers, then its bytes, fed in
    the order they come."""

    __slots__ = ("first", "keep", "last", "skip", "total")

    def __init__(self, want: Asked, content_range: bytes | None):
        match = _CONTENT_RANGE.fullmatch(content_range or b"")
        if match is None:
            raise Unreadable
        sent_first, sent_last, total = int(match.group(1)), int(match.group(2)), match.group(3)
        if want.first is None:
            first = max(sent_first, sent_last - want.suffix + 1)
            last = sent_last
        else:
            first = want.first
            last = sent_last if want.last is None else min(want.last, sent_last)
        if first > sent_last and total != b"*" and first >= int(total):
            raise Unsatisfiable(total)
        if not sent_first <= first <= last <= sent_last:
            raise Unreadable
        self.first, self.last, self.total = first, last, total
        self.skip = first - sent_first
        self.keep = last - first + 1

    def headers(self, headers: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
        kept = [(name, value) for name, value in headers if name not in (b"content-range", b"content-length")]
        kept.append((b"content-range", b"bytes %d-%d/%s" % (self.first, self.last, self.total)))
        kept.append((b"content-length", b"%d" % self.keep))
        return kept

    def feed(self, data: bytes) -> bytes:
        if self.skip:
            skipped = min(self.skip, len(data))
            data = data[skipped:]
            self.skip -= skipped
        data = data[: self.keep]
        self.keep -= len(data)
        return data
