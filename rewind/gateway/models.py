"""Upstream MCP servers, the tools they export through us, and every call forwarded to them."""

from __future__ import annotations

import json
from typing import Any

from django.db import models

from rewind.lib.crypto import decrypt


class Policy(models.TextChoices):
    """What happens to a call of an upstream tool that the mutating-tool catalog does not list."""

    PASS = "pass", "pass: forward and record the sighting"
    GUARD_IF_PROTECTED = "guard-if-protected", "guard-if-protected: guard when an argument names a protected VM"
    HOLD = "hold", "hold: refuse until a person classifies the tool"
    APPROVE = "approve", "approve: guard when an argument names a protected VM, then hold each call for a person"
    DENY = "deny", "deny: refuse every call"


class Upstream(models.Model):
    """One MCP server whose tools agents reach only through this service.

    Credentials (HTTP headers, the stdio server's environment) are stored encrypted like site
    passwords; the agent's own token is never sent upstream.
    """

    class Transport(models.TextChoices):
        HTTP = "http", "streamable HTTP"
        STDIO = "stdio", "stdio (a command this service starts)"

    name = models.CharField(
        max_length=40,
        unique=True,
        help_text="The server part of catalog names (ssh in ssh/exec): lower-case letters, digits, - and _.",
    )
    transport = models.CharField(max_length=5, choices=Transport.choices, default=Transport.HTTP)
    url = models.URLField(blank=True, help_text="Streamable HTTP: the server's MCP endpoint, e.g. https://h/mcp")
    headers_encrypted = models.TextField(blank=True, editable=False)
    command = models.JSONField(
        default=list, blank=True, help_text='stdio: the program and its arguments, e.g. ["npx", "ssh-mcp"]'
    )
    env_encrypted = models.TextField(blank=True, editable=False)
    enabled = models.BooleanField(default=True)
    connect_timeout_s = models.FloatField(default=10.0, help_text="Seconds to connect and agree a protocol.")
    call_timeout_s = models.FloatField(default=300.0, help_text="Seconds a forwarded call may take.")
    default_policy = models.CharField(
        max_length=20,
        choices=Policy.choices,
        default=Policy.GUARD_IF_PROTECTED,
        help_text="For its tools the catalog does not list and that are not annotated read-only "
        "(those pass unless their own policy says otherwise).",
    )
    host_vm = models.CharField(
        "host VM",
        max_length=255,
        blank=True,
        help_text="For a server that serves one machine (e.g. ssh-mcp --host web01): that VM. Its tools that "
        "may change something are then guarded on it, whatever their arguments say.",
    )
    tools_listed_at = models.DateTimeField(null=True, blank=True, editable=False)
    last_error = models.TextField(blank=True, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(transport__in=["http", "stdio"]), name="upstream_transport_valid"
            ),
            models.CheckConstraint(
                condition=models.Q(default_policy__in=["pass", "guard-if-protected", "hold", "approve", "deny"]),
                name="upstream_policy_valid",
            ),
        ]

    def __str__(self) -> str:
        return self.name

    def headers(self) -> dict[str, str]:
        return json.loads(decrypt(self.headers_encrypted)) if self.headers_encrypted else {}

    def env(self) -> dict[str, str]:
        return json.loads(decrypt(self.env_encrypted)) if self.env_encrypted else {}

    def audit_data(self) -> dict[str, Any]:
        # Header and variable names only: their values may be credentials.
        return {
            "name": self.name,
            "transport": self.transport,
            "url": self.url,
            "command": self.command,
            "header_names": sorted(self.headers()),
            "env_names": sorted(self.env()),
            "enabled": self.enabled,
            "connect_timeout_s": self.connect_timeout_s,
            "call_timeout_s": self.call_timeout_s,
            "default_policy": self.default_policy,
            "host_vm": self.host_vm,
        }


class UpstreamTool(models.Model):
    """A tool an upstream listed, and the name agents call it by here."""

    class State(models.TextChoices):
        EXPORTED = "exported"
        COLLISION = "collision"  # its exposed name is another tool's: refused at listing
        GONE = "gone"  # the upstream's last listing no longer has it

    upstream = models.ForeignKey(Upstream, on_delete=models.CASCADE, related_name="tools")
    name = models.CharField(max_length=200, help_text="The upstream's own name for the tool.")
    exposed_name = models.CharField(max_length=40, db_index=True)
    title = models.CharField(max_length=200, blank=True)
    description = models.TextField(blank=True)
    input_schema = models.JSONField(default=dict)
    output_schema = models.JSONField(null=True, blank=True)
    annotations = models.JSONField(null=True, blank=True)
    meta = models.JSONField(null=True, blank=True)
    policy = models.CharField(
        max_length=20,
        choices=Policy.choices,
        blank=True,
        help_text="Empty: read-only tools pass, others follow the upstream's default policy.",
    )
    state = models.CharField(max_length=10, choices=State.choices, default=State.EXPORTED)
    problem = models.CharField(max_length=300, blank=True)
    first_listed_at = models.DateTimeField(auto_now_add=True)
    last_listed_at = models.DateTimeField()
    # The definition pinned: agents see and call the tool only while what the upstream lists is what a
    # person approved (``rewind.gateway.definitions``).
    digest = models.CharField(max_length=64, blank=True, help_text="Of the definition the upstream last listed.")
    approved_digest = models.CharField(max_length=64, blank=True)
    approved_definition = models.JSONField(null=True, blank=True)
    approved_by = models.CharField(max_length=150, blank=True)
    approved_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["upstream__name", "name"]
        constraints = [
            models.UniqueConstraint(fields=["upstream", "name"], name="upstream_tool_unique"),
            models.UniqueConstraint(
                fields=["exposed_name"], condition=models.Q(state="exported"), name="upstream_tool_exposed_unique"
            ),
            models.CheckConstraint(
                condition=models.Q(state__in=["exported", "collision", "gone"]), name="upstream_tool_state_valid"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.upstream.name}/{self.name}"

    @property
    def catalog_name(self) -> str:
        return f"{self.upstream.name}/{self.name}".lower()

    @property
    def read_only(self) -> bool:
        return bool((self.annotations or {}).get("readOnlyHint"))

    @property
    def held(self) -> bool:
        """Its definition is new or changed since a person approved one: not listed, refused if called."""
        return self.digest != self.approved_digest


class GatewayCall(models.Model):
    """One call an agent made to an upstream tool through the gateway, forwarded or not."""

    class Decision(models.TextChoices):
        GUARDED = "guarded"  # the catalog lists it, or its policy found a protected VM: guarded first
        PASSED = "passed"  # forwarded without a guard
        REFUSED = "refused"  # not forwarded: the guard said not to proceed, or the arguments were bad
        HELD = "held"  # not forwarded: the tool waits for a person to classify it
        AWAITING = "awaiting"  # guarded (where a VM is protected); the call waits for a person's approval
        RELEASED = "released"  # a person approved it: forwarded once, with exactly the approved arguments

    class Outcome(models.TextChoices):
        DECIDING = "deciding"
        FORWARDED = "forwarded"
        OK = "ok"
        ERROR = "error"  # the upstream answered with a tool error
        UPSTREAM_FAILED = "upstream_failed"  # down, slow or unintelligible
        NOT_FORWARDED = "not_forwarded"

    call_id = models.CharField(max_length=40, unique=True)
    agent_name = models.CharField(max_length=64, db_index=True)
    agent_id = models.IntegerField(null=True, blank=True)
    upstream = models.ForeignKey(Upstream, on_delete=models.SET_NULL, null=True, blank=True, related_name="calls")
    upstream_name = models.CharField(max_length=40)
    tool = models.CharField(max_length=200, help_text="The upstream's name for the tool.")
    exposed_name = models.CharField(max_length=40)
    arguments = models.JSONField(default=dict, help_text="Masked like audit rows.")
    decision = models.CharField(max_length=10, choices=Decision.choices, blank=True)
    reason = models.CharField(max_length=500, blank=True)
    catalog_entry = models.CharField(max_length=200, blank=True)
    policy = models.CharField(max_length=20, blank=True)
    vm = models.CharField(max_length=255, blank=True)
    vm_arg = models.CharField(max_length=100, blank=True)
    change_id = models.CharField(max_length=100, blank=True)
    policy_version = models.BigIntegerField(null=True, blank=True, help_text="The policy version it was decided under.")
    guard = models.ForeignKey(
        "rewind.ChangeGuard", on_delete=models.SET_NULL, null=True, blank=True, related_name="gateway_calls"
    )
    outcome = models.CharField(max_length=16, choices=Outcome.choices, default=Outcome.DECIDING)
    error = models.CharField(max_length=500, blank=True)
    received_at = models.DateTimeField(auto_now_add=True)
    forwarded_at = models.DateTimeField(
        null=True, blank=True, help_text="When the call left for the upstream (our clock): what an undo goes before."
    )
    ended_at = models.DateTimeField(null=True, blank=True)
    request_id = models.CharField(max_length=64, blank=True)

    class Meta:
        ordering = ["-received_at"]
        indexes = [models.Index(fields=["agent_name", "-received_at"], name="gateway_call_agent_idx")]

    def __str__(self) -> str:
        return self.call_id


class UpstreamLink(models.Model):
    """One process's session to an upstream, as that process last found it: down since when and why, or answering.

    Written only when it changes (never per call), by the process itself, so "Test connection" can
    tell what every web process sees, not only what a fresh session from where it runs finds.
    """

    upstream = models.ForeignKey(Upstream, on_delete=models.CASCADE, related_name="links")
    process = models.CharField(max_length=200, help_text="Host and pid of the process holding the session.")
    down_since = models.DateTimeField(null=True, blank=True, help_text="Empty: it answers this process.")
    error = models.CharField(max_length=300, blank=True)
    changed_at = models.DateTimeField()

    class Meta:
        ordering = ["upstream__name", "process"]
        constraints = [models.UniqueConstraint(fields=["upstream", "process"], name="upstream_link_unique")]

    def __str__(self) -> str:
        return f"{self.upstream.name} in {self.process}"
