"""Sites (the ZVMs we talk to) and the stores every process shares per ZVM: its request window and its tokens."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.db import models

from rewind.zvm.pacing import MAX_PER_S as MAX_REQUESTS_PER_S


def validate_requests_per_s(value: float) -> None:
    if not 0 < value <= MAX_REQUESTS_PER_S:
        raise ValidationError(f"give a number of requests per second above 0 and at most {MAX_REQUESTS_PER_S:g}")


class Site(models.Model):
    """One ZVM (or ZCA) this service talks to. The password is stored encrypted; the identity fields are learned
    from ``/v1/localsite`` by ``site_check``, never typed by hand."""

    name = models.CharField(max_length=100, unique=True)
    base_url = models.URLField(help_text="e.g. https://zvm.example.com (no /v1)")
    username = models.CharField(max_length=150, blank=True)
    password_encrypted = models.TextField(blank=True, editable=False)
    client_id = models.CharField(max_length=100, default="zerto-client")
    client_secret_encrypted = models.TextField(blank=True, editable=False)
    verify_tls = models.BooleanField(default=False, help_text="ZVM appliances ship self-signed certificates.")
    ca_bundle = models.TextField(blank=True, help_text="PEM certificate(s) to pin instead of the system store.")
    enabled = models.BooleanField(default=True)
    max_requests_per_s = models.FloatField(
        null=True,
        blank=True,
        validators=[validate_requests_per_s],
        help_text="Most requests per second to this ZVM from all our processes; empty: ZVM_MAX_REQUESTS_PER_S.",
    )

    identifier = models.CharField(max_length=64, blank=True, db_index=True, editable=False)
    site_type = models.CharField(max_length=50, blank=True, editable=False)
    version = models.CharField(max_length=50, blank=True, editable=False)
    identity_checked_at = models.DateTimeField(null=True, blank=True, editable=False)
    last_error = models.TextField(blank=True, editable=False)
    # The ZVM's clock minus ours (seconds), measured from the Date of its answers; every time
    # window sent to it and every time it shows is converted through this.
    clock_offset_s = models.FloatField(null=True, blank=True, editable=False)
    clock_checked_at = models.DateTimeField(null=True, blank=True, editable=False)

    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(
                fields=["identifier"], condition=~models.Q(identifier=""), name="site_identifier_unique"
            )
        ]

    def __str__(self) -> str:
        return self.name

    def audit_data(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "base_url": self.base_url,
            "username": self.username,
            "client_id": self.client_id,
            "verify_tls": self.verify_tls,
            "enabled": self.enabled,
            "max_requests_per_s": self.max_requests_per_s,
            "ca_bundle_pinned": bool(self.ca_bundle),
        }


class ZvmRateWindow(models.Model):
    """The send times lately reserved for one ZVM (``ZvmConnection.zvm_key``), when the request cap is counted in
    the database: up to the cap's count of wall-clock times, ascending, space-separated."""

    key = models.CharField(max_length=64, primary_key=True)
    recent = models.TextField(blank=True, default="")

    class Meta:
        verbose_name = "ZVM request window"

    def __str__(self) -> str:
        return self.key


class ZvmToken(models.Model):
    """A Keycloak token shared by every process, when tokens are kept in the database: one row per login (a digest:
    no address or name in clear), the token Fernet-encrypted; ``login_claimed_until`` lets one process log in
    while the others wait for its token."""

    key = models.CharField(max_length=64, primary_key=True)
    token_encrypted = models.TextField(blank=True, default="")
    expires_at = models.FloatField(default=0.0)  # wall-clock seconds
    lifetime = models.FloatField(default=0.0)
    login_claimed_until = models.FloatField(default=0.0)  # wall-clock seconds

    class Meta:
        verbose_name = "ZVM token"

    def __str__(self) -> str:
        return self.key


class SiteCircuit(models.Model):
    """One site's circuit breaker, when it is kept in the database; written only through ``rewind.sites.circuit``,
    and a row of its own so that saving a site cannot overwrite it."""

    site = models.OneToOneField(Site, on_delete=models.CASCADE, primary_key=True, related_name="circuit")
    state = models.CharField(max_length=10, default="closed")
    failures = models.PositiveIntegerField(default=0)
    opened_at = models.FloatField(default=0.0)
    reason = models.TextField(blank=True, default="")
    next_trial_at = models.FloatField(default=0.0)
    opens = models.PositiveIntegerField(default=0)
    # The audit log's view: the last state it recorded, when, and the flaps not recorded since.
    audited_state = models.CharField(max_length=10, default="closed")
    audited_at = models.FloatField(default=0.0)
    flaps = models.PositiveIntegerField(default=0)

    class Meta:
        verbose_name = "site circuit"

    def __str__(self) -> str:
        return f"{self.site_id}: {self.state}"


class ZvmRequestCount(models.Model):
    """Requests sent to one site's ZVM with one result, by every process, when they are counted
    in the database (``rewind.sites.requestcount``); ``/metrics`` reports them."""

    site = models.CharField(max_length=100, help_text="The site's name when the requests were sent.")
    result = models.CharField(
        max_length=20, help_text="2xx, 3xx, 4xx, 5xx, or timeout, connect_error, tls_error, error."
    )
    count = models.PositiveBigIntegerField(default=0)

    class Meta:
        verbose_name = "ZVM request count"
        constraints = [models.UniqueConstraint(fields=["site", "result"], name="zvm_request_count_unique")]

    def __str__(self) -> str:
        return f"{self.site} {self.result}: {self.count}"
