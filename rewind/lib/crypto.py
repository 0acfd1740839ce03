"""Encryption at rest for ZVM credentials (Fernet, key from REWIND_ENCRYPTION_KEY), and the signing key of the audit anchors."""

from __future__ import annotations

import base64
import binascii
import hashlib
from functools import lru_cache

from cryptography.fernet import Fernet, InvalidToken
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured


@lru_cache(maxsize=1)
def _fernet() -> Fernet:
    try:
        return Fernet(settings.REWIND_ENCRYPTION_KEY.encode())
    except (ValueError, TypeError):
        raise ImproperlyConfigured(
            "REWIND_ENCRYPTION_KEY must be a Fernet key (32 url-safe base64-encoded bytes)"
        ) from None


def encrypt(plaintext: str) -> str:
    if not plaintext:
        return ""
    return _fernet().encrypt(plaintext.encode()).decode()


class DecryptionError(Exception):
    pass


def decrypt(ciphertext: str) -> str:
    if not ciphertext:
        return ""
    try:
        return _fernet().decrypt(ciphertext.encode()).decode()
    except InvalidToken:
        raise DecryptionError(
            "a stored credential cannot be decrypted: REWIND_ENCRYPTION_KEY changed since it was saved"
        ) from None


def new_signing_key() -> str:
    """A fresh Ed25519 signing key as REWIND_AUDIT_ANCHOR_KEY holds one: the base64 of its 32 private bytes."""
    return base64.b64encode(Ed25519PrivateKey.generate().private_bytes_raw()).decode()


def signing_key(value: str) -> Ed25519PrivateKey:
    """The key ``value`` holds; raises ImproperlyConfigured naming the setting."""
    try:
        return Ed25519PrivateKey.from_private_bytes(base64.b64decode(value.strip(), validate=True))
    except (ValueError, binascii.Error):
        raise ImproperlyConfigured(
            "REWIND_AUDIT_ANCHOR_KEY must be the base64 of a 32-byte Ed25519 private key "
            "(python -c 'from rewind.lib.crypto import new_signing_key; print(new_signing_key())')"
        ) from None


def key_id(public: Ed25519PublicKey) -> str:
    return hashlib.sha256(public.public_bytes_raw()).hexdigest()[:16]
