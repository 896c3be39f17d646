"""The TLS context the platform's outbound HTTP calls share.

httpx builds an SSL context for every client it makes, loading the whole CA bundle
(about 24 ms of CPU), and ``httpx.get``/``httpx.post``/``httpx.request`` make a
client per call: each metrics query, webhook attempt, key-set fetch and driver call
paid it. Built once per process and shared, as an SSLContext may be between
threads; httpx's own defaults (its CA bundle, ``SSL_CERT_FILE``/``SSL_CERT_DIR``)
are kept.
"""

from __future__ import annotations

import ssl
from functools import cache

import httpx


@cache
def tls() -> ssl.SSLContext:
    """Pass as ``verify=`` to an httpx call or client."""
    return httpx.create_ssl_context()
