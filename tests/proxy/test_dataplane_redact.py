"""Secrets are masked in streamed bodies wherever the chunks happen to be cut."""

import pytest

from apps.proxy.dataplane.redact import Redactor

SECRET = b"0123456789abcdef0123456789abcdef"
PAGE = b'<script>{"baseUrl": "/w/x/", "token": "' + SECRET + b'", "other": 1}</script>' * 3
MASKED = b"x" * len(SECRET)


@pytest.mark.parametrize("size", [1, 2, 7, 31, 32, 33, 64, len(PAGE)])
def test_a_secret_split_across_chunks_is_masked(size):
    redactor = Redactor((SECRET,))
    out = b"".join(redactor.feed(PAGE[i : i + size]) for i in range(0, len(PAGE), size)) + redactor.flush()
    assert out == PAGE.replace(SECRET, MASKED)
    assert len(out) == len(PAGE)


def test_text_that_cannot_start_a_secret_is_not_held_back():
    """An event stream's events go on at once; only a possible secret's beginning waits."""
    redactor = Redactor((SECRET,))
    assert redactor.feed(b"data: one\n\n") == b"data: one\n\n"
    assert redactor.feed(b"data: 0123") == b"data: "
    assert redactor.feed(b"x\n\n") == b"0123x\n\n"
