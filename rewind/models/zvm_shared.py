from __future__ import annotations

from django.db import models


class ZvmRateWindow(models.Model):
    """The send times lately reserved for one ZVM, when the request cap is counted in the database.

    One row per ZVM (``ZvmConnection.zvm_key``); ``recent`` holds up to the cap's count of
    wall-clock times, ascending, space-separated (see ``rewind.zvm.pacing``).
    """

    key = models.CharField(max_length=64, primary_key=True)
    recent = models.TextField(blank=True, default="")

    class Meta:
        verbose_name = "ZVM request window"

    def __str__(self) -> str:
        return self.key


class ZvmToken(models.Model):
    """A Keycloak token shared by every process, when tokens are kept in the database.

    One row per login (``ZvmConnection.login_key``, a digest: no address or name in clear).
    The token is Fernet-encrypted like site passwords. ``login_claimed_until`` lets one
    process log in while the others wait for its token.
    """

    key = models.CharField(max_length=64, primary_key=True)
    token_encrypted = models.TextField(blank=True, default="")
    expires_at = models.FloatField(default=0.0)  # wall-clock seconds
    lifetime = models.FloatField(default=0.0)
    login_claimed_until = models.FloatField(default=0.0)  # wall-clock seconds

    class Meta:
        verbose_name = "ZVM token"

    def __str__(self) -> str:
        return self.key
