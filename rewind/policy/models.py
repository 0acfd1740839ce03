"""The policy's version, the VM rules that raise a change to "a person approves it", and the stop switches."""

from __future__ import annotations

from typing import Any

from django.db import models


class Decision(models.TextChoices):
    """How a guarded change is decided: checkpoint and go on, checkpoint then wait for a person, or refuse."""

    CHECKPOINT = "checkpoint", "checkpoint: guard every VPG, then go on"
    APPROVE = "approve", "approve: guard every VPG, then hold the call until a person approves it"
    DENY = "deny", "deny: refuse every call"


# From the least to the most a person is asked: a rule may raise a decision, never lower it.
DECISION_ORDER = (Decision.CHECKPOINT, Decision.APPROVE, Decision.DENY)


class PolicyVersion(models.Model):
    """One row (id 1): a number raised by every change of a decision, a VM rule or an agent's setting.

    Every guard and gateway call records the number it was decided under; a held call is released
    only after its decision is taken again under the number in force then.
    """

    n = models.BigIntegerField(default=0)
    changed_at = models.DateTimeField(null=True, blank=True)
    changed_by = models.CharField(max_length=150, blank=True)
    what = models.CharField(max_length=300, blank=True, help_text="The change that raised it last.")

    def __str__(self) -> str:
        return f"policy version {self.n}"


class ApprovalRule(models.Model):
    """A VM rule: a change to a VM it matches waits for a person's approval after its checkpoint."""

    class Kind(models.TextChoices):
        VM_NAME = "vm_name", "VM name (shell-style pattern, e.g. db-*)"
        VPG = "vpg", "VPG (its name)"
        SITE = "site", "site (the protected site's name)"

    kind = models.CharField(max_length=10, choices=Kind.choices)
    value = models.CharField(max_length=255, help_text="Matched without regard to case.")
    note = models.CharField(max_length=300, blank=True, help_text="Why, for whoever reads the held call.")
    enabled = models.BooleanField(default=True)
    created_by = models.CharField(max_length=150, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        verbose_name = "VM approval rule"
        verbose_name_plural = "VM approval rules"
        ordering = ["kind", "value"]
        constraints = [
            models.UniqueConstraint(fields=["kind", "value"], name="approval_rule_unique"),
            models.CheckConstraint(condition=models.Q(kind__in=["vm_name", "vpg", "site"]), name="approval_rule_kind"),
        ]

    def __str__(self) -> str:
        return f"{self.get_kind_display().split(' (')[0]} {self.value}"

    def audit_data(self) -> dict[str, Any]:
        return {"kind": self.kind, "value": self.value, "note": self.note, "enabled": self.enabled}


class StopSwitch(models.Model):
    """A stop a person engaged: every guarded change in its scope is refused until a person lifts it.

    No MCP tool reaches it: it is engaged and lifted only by people (the admin, REST, ``manage.py stop``).
    """

    class Scope(models.TextChoices):
        EVERYWHERE = "everywhere", "everywhere: every agent, every VM"
        AGENT = "agent", "one agent"
        VM = "vm", "one VM"

    scope = models.CharField(max_length=10, choices=Scope.choices)
    agent = models.ForeignKey("rewind.Agent", null=True, blank=True, on_delete=models.SET_NULL, related_name="stops")
    agent_name = models.CharField(max_length=64, blank=True)
    vm = models.CharField("VM", max_length=255, blank=True, help_text="The VM's name as Zerto shows it.")
    reason = models.CharField(max_length=500)
    stopped_by = models.CharField(max_length=150)
    stopped_at = models.DateTimeField()
    lifted_by = models.CharField(max_length=150, blank=True)
    lifted_at = models.DateTimeField(null=True, blank=True, db_index=True)
    lift_note = models.CharField(max_length=500, blank=True)

    class Meta:
        verbose_name = "stop switch"
        verbose_name_plural = "stop switches"
        ordering = ["-stopped_at"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(scope__in=["everywhere", "agent", "vm"]), name="stop_scope_valid"
            ),
        ]

    def __str__(self) -> str:
        return f"stop {self.what}"

    @property
    def what(self) -> str:
        if self.scope == self.Scope.AGENT:
            return f"of agent {self.agent_name}"
        if self.scope == self.Scope.VM:
            return f"of VM {self.vm}"
        return "everywhere"

    @property
    def active(self) -> bool:
        return self.lifted_at is None

    def audit_data(self) -> dict[str, Any]:
        return {
            "scope": self.scope,
            "agent": self.agent_name or None,
            "vm": self.vm or None,
            "reason": self.reason,
            "stopped_by": self.stopped_by,
            "stopped_at": self.stopped_at.isoformat(),
            "lifted_by": self.lifted_by or None,
            "lifted_at": self.lifted_at.isoformat() if self.lifted_at else None,
            "lift_note": self.lift_note or None,
        }
