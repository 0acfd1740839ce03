"""Encryption at rest for ZVM credentials (Fernet, key from REWIND_ENCRYPTION_KEY)."""

from __future__ import annotations

from functools import lru_cache

from cryptography.fernet import Fernet, InvalidToken
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
