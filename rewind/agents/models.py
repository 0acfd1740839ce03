from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import models

from rewind.agents.limits import VmLimit
from rewind.mcp import scopes

ALL_SCOPES = " ".join(scopes.ALL)


class Agent(models.Model):
    """An AI agent allowed to call the MCP endpoint. Its name is what tags and audit rows carry."""

    name = models.SlugField(
        max_length=64, unique=True, help_text="Letters, digits, - and _; appears in checkpoint tags."
    )
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.PROTECT,
        related_name="agents",
        help_text="The person answerable for this agent; may not approve its recoveries.",
    )
    is_active = models.BooleanField(default=True)
    description = models.CharField(max_length=255, blank=True)
    # The VMs it may act on (rewind.agents.limits): one entry a line; empty does not limit.
    limit_vm_names = models.TextField(
        "limit to VM names", blank=True, help_text="Shell-style patterns, one a line (web*, db-0?); any case."
    )
    limit_vpgs = models.TextField(
        "limit to VPGs", blank=True, help_text="VPG names, one a line: every VPG of the VM must be one of them."
    )
    limit_sites = models.TextField(
        "limit to sites",
        blank=True,
        help_text="Site names as the ZVM shows them, one a line: the VM's protected site must be one of them.",
    )
    changes_need_approval = models.BooleanField(
        "every change needs a person",
        default=False,
        help_text="Every guarded change of this agent waits, after its checkpoint, for a person's approval.",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def audit_data(self) -> dict[str, Any]:
        return {
            "owner": self.owner.get_username(),
            "is_active": self.is_active,
            "description": self.description,
            "vm_limit": VmLimit.of(self).as_claim(),
            "changes_need_approval": self.changes_need_approval,
        }


class AgentToken(models.Model):
    """A bearer token of an agent. Only its SHA-256 is stored; the token is shown once."""

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="tokens")
    token_hash = models.CharField(max_length=64, unique=True, editable=False)
    prefix = models.CharField(
        max_length=16, editable=False, help_text="The token's first characters, to tell tokens apart."
    )
    label = models.CharField(max_length=100, blank=True)
    # Tokens issued before scopes existed hold every scope: nothing breaks on upgrade.
    scope = models.CharField(
        max_length=255, default=ALL_SCOPES, editable=False, help_text="What the token may do, separated by spaces."
    )
    created_at = models.DateTimeField(auto_now_add=True)
    created_by = models.CharField(max_length=150, blank=True, editable=False)
    expires_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True, editable=False)
    revoked_at = models.DateTimeField(null=True, blank=True, editable=False)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.agent.name} {self.prefix}…"

    def audit_data(self) -> dict[str, Any]:
        return {
            "agent": self.agent.name,
            "prefix": self.prefix,
            "label": self.label,
            "scope": self.scope,
            "expires_at": self.expires_at.isoformat() if self.expires_at else None,
        }


class CredentialsVersion(models.Model):
    """One row (id 1): a number raised by every token revocation and agent change. A process that keeps verified
    tokens reads it in a statement a call runs anyway, and looks a token up again when it moved, so a revocation
    takes effect on the next call."""

    n = models.BigIntegerField(default=0)

    def __str__(self) -> str:
        return f"credentials version {self.n}"
