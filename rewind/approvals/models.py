"""A call held for a person, and each person's approval of it."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import models


class HeldCall(models.Model):
    """One call of one tool with exactly these arguments, held after its checkpoints for a person."""

    class Mode(models.TextChoices):
        GATEWAY = "gateway", "gateway: forwarded once approved"
        GUARD = "guard", "guard: the agent makes the call once approved"

    class State(models.TextChoices):
        GUARDING = "guarding", "taking its checkpoints"  # a person sees it once they are listed
        PENDING = "pending", "waiting for a person"
        APPROVED = "approved"  # enough people approved; through the gateway, the release comes next
        DENIED = "denied"
        EXPIRED = "expired"
        RELEASING = "releasing", "checked again and forwarded"  # claimed: at most once
        FORWARDED = "forwarded", "forwarded once"
        REFUSED = "refused", "not forwarded"  # the guard failed, the policy now denies, a checkpoint is gone, ...

    OPEN = (State.GUARDING, State.PENDING)
    # Nothing more happens to it (an approved call of the guard alone is decided: the agent acts).
    FINAL = (State.DENIED, State.EXPIRED, State.FORWARDED, State.REFUSED)

    mode = models.CharField(max_length=8, choices=Mode.choices)
    state = models.CharField(max_length=10, choices=State.choices, default=State.PENDING, db_index=True)
    agent = models.ForeignKey("rewind.Agent", null=True, blank=True, on_delete=models.SET_NULL, related_name="held")
    agent_name = models.CharField(max_length=64, db_index=True)
    tool = models.CharField(max_length=200, help_text="server/tool, as the catalog names it.")
    upstream = models.ForeignKey(
        "rewind.Upstream", null=True, blank=True, on_delete=models.SET_NULL, related_name="held"
    )
    exposed_name = models.CharField(max_length=40, blank=True, help_text="The gateway's name for the tool.")
    tool_digest = models.CharField(
        max_length=64, blank=True, help_text="Of the tool's approved definition when the call was held."
    )
    # The exact arguments, encrypted: they go out as the agent sent them, secrets included. What a
    # page shows is ``arguments_shown`` (secret-looking values masked, like audit rows).
    arguments_encrypted = models.TextField(editable=False)
    arguments_shown = models.JSONField(default=dict)
    arguments_digest = models.CharField(max_length=64, help_text="SHA-256 of the arguments' RFC 8785 form.")
    vm = models.CharField("VM", max_length=255, blank=True)
    vm_identifier = models.CharField(max_length=255, blank=True)
    # {vpg, vpg_identifier, site_id, site, checkpoint_identifier, checkpoint_time}, one per VPG.
    checkpoints = models.JSONField(default=list, blank=True)
    guard = models.ForeignKey(
        "rewind.ChangeGuard", null=True, blank=True, on_delete=models.SET_NULL, related_name="held"
    )
    call_id = models.CharField(max_length=40, blank=True, help_text="The gateway call it holds.")
    change_id = models.CharField(max_length=100, blank=True)
    reason = models.CharField(max_length=500, help_text="Why a person must approve it.")
    policy_version = models.BigIntegerField(help_text="The policy version it was decided under.")
    released_policy_version = models.BigIntegerField(null=True, blank=True)
    approvals_required = models.PositiveSmallIntegerField(default=1)
    expires_at = models.DateTimeField(db_index=True)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    decided_at = models.DateTimeField(null=True, blank=True)
    decided_by = models.CharField(max_length=150, blank=True)
    released_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    refusal = models.TextField(blank=True, help_text="Why it was not forwarded (or, denied, the person's note).")
    outcome = models.CharField(max_length=16, blank=True, help_text="Forwarded: ok, error or upstream_failed.")
    result_encrypted = models.TextField(blank=True, editable=False)
    request_id = models.CharField(max_length=64, blank=True, db_index=True)

    class Meta:
        verbose_name = "held call"
        verbose_name_plural = "held calls"
        ordering = ["-created_at"]
        permissions = [("approve_heldcall", "Can approve or deny calls held for a person")]
        constraints = [
            # The same guard and the same arguments of the same tool: the same held call (a retry).
            models.UniqueConstraint(
                fields=["guard", "tool", "arguments_digest"],
                condition=models.Q(guard__isnull=False),
                name="held_call_once_per_guard",
            ),
            models.CheckConstraint(condition=models.Q(mode__in=["gateway", "guard"]), name="held_call_mode_valid"),
            models.CheckConstraint(
                condition=models.Q(
                    state__in=[
                        "guarding",
                        "pending",
                        "approved",
                        "denied",
                        "expired",
                        "releasing",
                        "forwarded",
                        "refused",
                    ]
                ),
                name="held_call_state_valid",
            ),
        ]

    def __str__(self) -> str:
        return f"held call #{self.pk} {self.tool}"

    @property
    def decided(self) -> bool:
        """A person decided it (approved or denied), whatever came of it after."""
        return self.decided_at is not None

    def audit_data(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "tool": self.tool,
            "agent": self.agent_name,
            "arguments": self.arguments_shown,
            "arguments_digest": self.arguments_digest,
            "vm": self.vm,
            "checkpoints": [c.get("checkpoint_identifier") for c in self.checkpoints],
            "policy_version": self.policy_version,
            "expires_at": self.expires_at.isoformat(),
            "call_id": self.call_id or None,
            "guard": self.guard_id,
        }


class HeldCallApproval(models.Model):
    """One person's approval; two distinct ones when four eyes are required."""

    held = models.ForeignKey(HeldCall, on_delete=models.CASCADE, related_name="approvals")
    approver = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="held_approvals")
    approver_name = models.CharField(max_length=150)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["created_at"]
        constraints = [models.UniqueConstraint(fields=["held", "approver"], name="held_approval_once_per_person")]

    def __str__(self) -> str:
        return f"{self.approver_name} approved held call #{self.held_id}"
