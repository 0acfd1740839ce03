"""The mutating-tool catalog and the sightings of tools it does not list.

A ``MutatingTool`` names an MCP tool (``server/tool``) or every tool of one server
(``server/*``) that changes a guest, and which of its arguments names the VM. Patterns are
stored lower-case and matched case-insensitively: MCP clients differ in how they spell
server names, and ``SSH/exec`` changing a guest is no less a change than ``ssh/exec``.
"""

from __future__ import annotations

from typing import Any

from django.db import models

from rewind.policy.models import Decision


class ActorKind(models.TextChoices):
    AGENT = "agent"
    USER = "user"
    SYSTEM = "system"


class MutatingTool(models.Model):
    class Platform(models.TextChoices):
        LINUX = "linux"
        WINDOWS = "windows"
        ANY = "any"

    pattern = models.CharField(
        max_length=200,
        unique=True,
        help_text="server/tool (e.g. ssh/exec) or server/* for every tool of a server; lower case.",
    )
    vm_arg = models.CharField(
        max_length=100, help_text="The argument of that tool whose value names the VM (host name, VM name or IP)."
    )
    platform = models.CharField(max_length=10, choices=Platform.choices, default=Platform.ANY)
    description = models.CharField(max_length=500)
    enabled = models.BooleanField(default=True, help_text="A disabled entry guards nothing.")
    decision = models.CharField(
        max_length=10,
        choices=Decision.choices,
        default=Decision.CHECKPOINT,
        help_text="What a call of it gets: a checkpoint of every VPG, a checkpoint then a person's approval, "
        "or a refusal.",
    )
    added_by = models.CharField(max_length=150, editable=False)
    added_by_kind = models.CharField(max_length=10, choices=ActorKind.choices, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["pattern"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(platform__in=["linux", "windows", "any"]), name="tool_platform_valid"
            ),
            models.CheckConstraint(condition=~models.Q(vm_arg=""), name="tool_vm_arg_required"),
            models.CheckConstraint(
                condition=models.Q(decision__in=["checkpoint", "approve", "deny"]), name="tool_decision_valid"
            ),
        ]

    def __str__(self) -> str:
        return self.pattern

    @property
    def is_pattern(self) -> bool:
        return self.pattern.endswith("/*")

    def audit_data(self) -> dict[str, Any]:
        return {
            "pattern": self.pattern,
            "vm_arg": self.vm_arg,
            "platform": self.platform,
            "description": self.description,
            "enabled": self.enabled,
            "decision": self.decision,
            "added_by": self.added_by,
            "added_by_kind": self.added_by_kind,
        }


class ToolSighting(models.Model):
    """A tool the guard was asked about, or the gateway saw listed, that no enabled catalog entry covers."""

    class Status(models.TextChoices):
        UNCLASSIFIED = "unclassified"
        IGNORED = "ignored"  # a human judged it read-only
        ADDED = "added"  # a human added it to the catalog

    tool = models.CharField(max_length=200, unique=True)
    count = models.PositiveIntegerField(default=0)
    first_seen_at = models.DateTimeField(auto_now_add=True)
    last_seen_at = models.DateTimeField()
    agents = models.JSONField(default=list, help_text="Names of the agents that asked about it.")
    argument_names = models.JSONField(default=list, help_text="Every argument name seen in its calls.")
    # Known before any call when an upstream of the gateway lists the tool (proactive sighting).
    annotations = models.JSONField(null=True, blank=True, help_text="The tool's MCP annotations, as listed.")
    suggested_vm_arg = models.CharField(
        max_length=100, blank=True, help_text="The argument that most likely names the VM; classify with it."
    )
    status = models.CharField(max_length=12, choices=Status.choices, default=Status.UNCLASSIFIED, db_index=True)
    classified_by = models.CharField(max_length=150, blank=True, editable=False)
    classified_at = models.DateTimeField(null=True, blank=True, editable=False)

    class Meta:
        ordering = ["-last_seen_at"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(status__in=["unclassified", "ignored", "added"]), name="sighting_status_valid"
            ),
        ]

    def __str__(self) -> str:
        return self.tool

    def audit_data(self) -> dict[str, Any]:
        return {"tool": self.tool, "status": self.status, "count": self.count}
