"""Tokens the platform signs itself (service accounts), RS256 with keys kept in
the database so every web replica signs and verifies with the same set."""

from __future__ import annotations

import json
import time
import uuid

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from django.conf import settings
from django.db import IntegrityError
from jwt.algorithms import RSAAlgorithm

from apps.core import secrets
from apps.tenancy.models import ServiceAccount, SigningKey

ALGORITHM = "RS256"
_KEY_CACHE_SECONDS = 60
# Unknown kids may come in floods; reload from the database at most this often.
_FORCED_RELOAD_GAP = 5
_cache: dict = {"at": 0.0, "public": {}, "signing": None}


def _create_key() -> SigningKey:
    private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = private.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    kid = uuid.uuid4().hex
    public_jwk = json.loads(RSAAlgorithm.to_jwk(private.public_key()))
    public_jwk.update({"kid": kid, "use": "sig", "alg": ALGORITHM})
    path = SigningKey.path_for(kid)
    secrets.store().write(path, pem)
    return SigningKey.objects.create(kid=kid, secret_path=path, public_jwk=public_jwk)


def _load() -> None:
    keys = list(SigningKey.objects.filter(retired_at__isnull=True))
    if not keys:
        try:
            keys = [_create_key()]
        except IntegrityError:  # another replica created it first
            keys = list(SigningKey.objects.filter(retired_at__isnull=True))
    _cache["public"] = {key.kid: RSAAlgorithm.from_jwk(json.dumps(key.public_jwk)) for key in keys}
    newest = keys[0]
    # Loaded once: parsing and validating the PEM costs ~50 ms of CPU per token otherwise.
    private_key = serialization.load_pem_private_key(
        secrets.store().read(newest.secret_path).encode(), password=None
    )
    _cache["signing"] = (newest.kid, private_key)
    _cache["at"] = time.monotonic()


def _fresh(force: bool = False) -> dict:
    if force or _cache["signing"] is None or time.monotonic() - _cache["at"] > _KEY_CACHE_SECONDS:
        _load()
    return _cache


def forget_cached_keys() -> None:
    _cache.update({"at": 0.0, "public": {}, "signing": None})


def jwks() -> dict:
    _fresh()  # a fresh install publishes its first key before any token is signed with it
    return {"keys": [key.public_jwk for key in SigningKey.objects.filter(retired_at__isnull=True)]}


def issue_for_service_account(account: ServiceAccount) -> tuple[str, int]:
    kid, private_key = _fresh()["signing"]
    now = int(time.time())
    lifetime = settings.PLATFORM_TOKEN_LIFETIME_SECONDS
    claims = {
        "iss": settings.ISSUER,
        "sub": f"sa:{account.pk}",
        "aud": settings.ISSUER,
        "iat": now,
        "nbf": now,
        "exp": now + lifetime,
        "jti": uuid.uuid4().hex,
        "client_id": account.client_id,
        "sa": str(account.pk),
    }
    return jwt.encode(claims, private_key, algorithm=ALGORITHM, headers={"kid": kid}), lifetime


def public_key(kid: str):
    keys = _fresh()["public"]
    if kid not in keys and time.monotonic() - _cache["at"] > _FORCED_RELOAD_GAP:
        keys = _fresh(force=True)["public"]  # a key another replica just created
    return keys.get(kid)
