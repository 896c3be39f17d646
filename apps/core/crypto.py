"""Secrets at rest: Fernet with ``GPUAAS_ENCRYPTION_KEYS`` (newest first, older
keys still decrypt so keys can be rotated), and hashing of high-entropy secrets."""

from __future__ import annotations

import hashlib
import hmac
import secrets
from functools import cache

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from django.conf import settings


@cache
def _keys(keys: tuple[str, ...]) -> MultiFernet:
    return MultiFernet([Fernet(key) for key in keys])


def _fernet() -> MultiFernet:
    # Keyed by the setting's value, so a changed key list (a rotation) takes effect.
    return _keys(tuple(settings.ENCRYPTION_KEYS))


def encrypt(plaintext: str) -> str:
    return _fernet().encrypt(plaintext.encode()).decode()


def decrypt(token: str) -> str:
    return _fernet().decrypt(token.encode()).decode()


def under_newest_key(token: str) -> bool:
    """Whether the newest key (the first of ``GPUAAS_ENCRYPTION_KEYS``) decrypts ``token``."""
    try:
        Fernet(settings.ENCRYPTION_KEYS[0]).decrypt(token.encode())
    except InvalidToken:
        return False
    return True


def reencrypt(token: str) -> str:
    """``token`` encrypted again under the newest key (any configured key may decrypt it)."""
    return _fernet().rotate(token.encode()).decode()


def new_secret(nbytes: int = 32) -> str:
    return secrets.token_urlsafe(nbytes)


def hash_secret(secret: str) -> str:
    # The secrets we hash are 256-bit random values, so a fast hash is enough:
    # there is no dictionary to guess from (see docs/decisions/0003).
    return hashlib.sha256(secret.encode()).hexdigest()


def secret_matches(secret: str, hashed: str) -> bool:
    return hmac.compare_digest(hash_secret(secret), hashed)
