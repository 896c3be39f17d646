"""A real OpenID-style issuer for bearer-token tests: RSA keys, a JWKS served
over HTTP on loopback, and token minting with any claims or header."""

from __future__ import annotations

import itertools
import json
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import jwt
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm

from tests.support.servers import reply_json

# An RSA key takes about 45 ms of CPU to make, and hundreds of tests start issuers:
# keys come from a pool made once per process, in turn, so the issuers and rotations
# of one test still hold distinct keys (up to the pool's size), each with its own kid.
_POOL_SIZE = 8
_pool: list[rsa.RSAPrivateKey] = []
_turn = itertools.count()


def _private_key() -> rsa.RSAPrivateKey:
    n = next(_turn) % _POOL_SIZE
    if n == len(_pool):
        _pool.append(rsa.generate_private_key(public_exponent=65537, key_size=2048))
    return _pool[n]


class _Key:
    def __init__(self):
        self.kid = uuid.uuid4().hex[:16]
        self.private = _private_key()

    @property
    def jwk(self) -> dict:
        data = json.loads(RSAAlgorithm.to_jwk(self.private.public_key()))
        data.update({"kid": self.kid, "use": "sig", "alg": "RS256"})
        return data


class FakeIssuer:
    """``limits``: extra trust fields of its ``GPUAAS_TRUSTED_ISSUERS`` entry
    (``tenants``, ``roles``, ``platform_roles``). By default it is CCP's own
    issuer, trusted for platform roles."""

    def __init__(self, **limits):
        self.limits = {"platform_roles": True, **limits}
        self.keys = [_Key()]
        self.jwks_requests = 0
        self.jwks_delay = 0.0  # seconds before the key set is answered (a slow IdP)
        issuer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                issuer.jwks_requests += 1
                time.sleep(issuer.jwks_delay)
                reply_json(self, 200, {"keys": [key.jwk for key in issuer.keys]})

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        # A short poll interval: close() (shutdown) returns in ~50 ms instead of 500 ms.
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self.thread.start()
        port = self.server.server_address[1]
        self.issuer = f"http://127.0.0.1:{port}/realms/ccp"
        self.jwks_uri = f"http://127.0.0.1:{port}/realms/ccp/protocol/openid-connect/certs"
        self.audience = "gpuaas"

    @property
    def config(self) -> dict:
        return {"issuer": self.issuer, "jwks_uri": self.jwks_uri, "audience": self.audience, **self.limits}

    def rotate(self) -> None:
        """Publish a new key and stop publishing the old one."""
        self.keys = [_Key()]

    def claims(self, *, lifetime: int = 300, **extra) -> dict:
        """What a token of this issuer's portal client claims, for a new subject, valid
        from now for ``lifetime`` seconds; ``extra`` adds claims or replaces them."""
        now = int(time.time())
        return {
            "iss": self.issuer,
            "sub": uuid.uuid4().hex,
            "aud": self.audience,
            "iat": now,
            "exp": now + lifetime,
            "azp": "ccp-portal",
            **extra,
        }

    def token(
        self,
        claims: dict | None = None,
        *,
        headers: dict | None = None,
        key: _Key | None = None,
        algorithm: str = "RS256",
        lifetime: int = 300,
    ) -> str:
        body = self.claims(lifetime=lifetime, **(claims or {}))
        key = key or self.keys[0]
        header = {"kid": key.kid}
        header.update(headers or {})
        return jwt.encode(body, key.private, algorithm=algorithm, headers=header)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
