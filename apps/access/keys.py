"""OpenSSH public keys as users paste them: checked with ``cryptography``, normalised
to ``type base64``, fingerprinted as ``ssh-keygen -l`` prints them."""

from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass

from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import dsa, rsa

from apps.core.errors import ValidationFailed

MAX_KEY_CHARS = 16_384  # an RSA 16384-bit key is about 2.8 kB; anything longer is not a key
MAX_COMMENT_CHARS = 100
MIN_RSA_BITS = 2048


@dataclass(frozen=True)
class PublicKey:
    public_key: str  # "ssh-ed25519 AAAA..."
    comment: str
    fingerprint: str  # "SHA256:..."


def fingerprint(openssh_line: str) -> str:
    """``SHA256:<unpadded base64>`` of the key blob, as OpenSSH shows it."""
    blob = base64.b64decode(openssh_line.split()[1])
    return "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")


def parse(text: str, field: str = "public_key") -> PublicKey:
    """One OpenSSH public key line (``type base64 [comment]``); ``ValidationFailed`` otherwise."""
    text = (text or "").strip()

    def refuse(message: str):
        raise ValidationFailed(f"Invalid {field.replace('_', ' ')}: {message}", details={field: [message]})

    if not text:
        refuse("This field may not be blank.")
    if len(text) > MAX_KEY_CHARS or "\n" in text or "\r" in text:
        refuse("Give one OpenSSH public key on one line (ssh-ed25519 AAAA... comment).")
    try:
        key = serialization.load_ssh_public_key(text.encode())
    except (ValueError, UnsupportedAlgorithm):
        refuse("Not an OpenSSH public key (expected a line like ssh-ed25519 AAAA... you@host).")
    if isinstance(key, dsa.DSAPublicKey):
        refuse("DSA keys are no longer accepted by OpenSSH; use ed25519.")
    if isinstance(key, rsa.RSAPublicKey) and key.key_size < MIN_RSA_BITS:
        refuse(f"RSA keys need at least {MIN_RSA_BITS} bits.")
    line = key.public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH).decode()
    parts = text.split(None, 2)
    comment = parts[2] if len(parts) > 2 else ""
    comment = "".join(ch for ch in comment if ch.isprintable())[:MAX_COMMENT_CHARS]
    return PublicKey(public_key=line, comment=comment, fingerprint=fingerprint(line))
