from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.db import models

from rewind.checkpoints.lease import Lease


class ChangeGuard(models.Model):
    """A guard, one guarded change: the same tagged checkpoint requested on every VPG protecting a VM.
    ``(vm_identifier, change_id)`` is unique: asking again with the same change id returns this record."""

    class Status(models.TextChoices):
        PENDING = "pending"  # recorded; its sites' pollers have not taken it into an insert batch yet
        RUNNING = "running"  # inserting / waiting for the checkpoints to be listed
        OK = "ok"  # every VPG lists the tagged checkpoint
        FAILED = "failed"  # at least one VPG failed or timed out: do not proceed

    UNFINISHED = (Status.PENDING, Status.RUNNING)
    FINISHED = (Status.OK, Status.FAILED)

    agent = models.ForeignKey("rewind.Agent", null=True, blank=True, on_delete=models.SET_NULL, related_name="guards")
    agent_name = models.CharField(max_length=64, db_index=True)
    tool = models.CharField(max_length=200, blank=True, help_text="server/tool the agent was about to call")
    action = models.CharField(max_length=200)
    vm_identifier = models.CharField(max_length=255, db_index=True)
    vm_name = models.CharField(max_length=255, db_index=True)
    change_id = models.CharField(max_length=100)
    tag = models.CharField(max_length=255)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING, db_index=True)
    error = models.TextField(blank=True)
    request_id = models.CharField(max_length=64, blank=True, db_index=True)
    timeout_s = models.PositiveIntegerField()
    # The decision it was made under: checkpoint, or approve (a person approves the call after the checkpoint).
    decision = models.CharField(max_length=10, default="checkpoint")
    decision_reason = models.CharField(max_length=500, blank=True)
    policy_version = models.BigIntegerField(null=True, blank=True)
    requested_at = models.DateTimeField(auto_now_add=True, db_index=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    # Nobody holds a guard: its rows are the site pollers' (``rewind.checkpoints.poller``), and a
    # poller whose chain died is restarted by the beat's sweep or the next status read.

    class Meta:
        verbose_name = "guard"
        verbose_name_plural = "guards"
        ordering = ["-requested_at"]
        constraints = [
            models.UniqueConstraint(fields=["vm_identifier", "change_id"], name="guard_vm_change_unique"),
        ]

    def __str__(self) -> str:
        return self.tag

    @property
    def deadline(self) -> datetime:
        return deadline_of(self.requested_at, self.timeout_s)


def deadline_of(requested_at: datetime, timeout_s: float) -> datetime:
    """A guard's deadline: from the request, not from when a poller got to it (queued time counts
    against ``timeout_s``). Also for a guard read as values, not as a model."""
    return requested_at + timedelta(seconds=timeout_s)


class ChangeGuardVpg(models.Model):
    """The tagged checkpoint of one guard on one VPG: the attempt, then its outcome.

    Code calls it ``TaggedCheckpoint`` (below). The class keeps its first name because Django
    derives the model name from it: the migrations, the permission codenames
    (``view_changeguardvpg``) and the admin URLs name ``changeguardvpg``, and renaming the
    class would take a migration.
    """

    class Status(models.TextChoices):
        PENDING = "pending"
        INSERTING = "inserting"  # the insert call was (or is being) made; task_id once known
        WAITING = "waiting"  # task accepted; polling the task, then the checkpoint list
        LISTED = "listed"  # the ZVM lists the checkpoint with our tag
        FAILED = "failed"
        TIMED_OUT = "timed_out"

    FINAL = (Status.LISTED, Status.FAILED, Status.TIMED_OUT)
    NOT_FINAL = (Status.PENDING, Status.INSERTING, Status.WAITING)
    # What the site poller's rounds ask the ZVM about: the insert was made (or its outcome is unknown).
    INSERTED = (Status.INSERTING, Status.WAITING)

    guard = models.ForeignKey(ChangeGuard, on_delete=models.CASCADE, related_name="vpgs")
    vpg_identifier = models.CharField(max_length=64)
    vpg_name = models.CharField(max_length=255)
    site = models.ForeignKey(
        "rewind.Site",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        help_text="The protected site's ZVM used to insert.",
    )
    protected_site_identifier = models.CharField(max_length=64, blank=True)
    recovery_site_identifier = models.CharField(max_length=64, blank=True)
    recovery_site_name = models.CharField(max_length=255, blank=True)
    task_id = models.CharField(max_length=255, blank=True)
    checkpoint_identifier = models.CharField(max_length=64, blank=True, db_index=True)
    checkpoint_timestamp = models.DateTimeField(null=True, blank=True)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING)
    error = models.TextField(blank=True)
    insert_started_at = models.DateTimeField(null=True, blank=True)
    waited_ms = models.PositiveIntegerField(null=True, blank=True)
    # Set when a later sweep (rewind.checkpoints.late) found the checkpoint listed after this
    # row had timed out: the row stays timed_out, and its guard not ok (the agent was told not
    # to proceed), but a recovery may use the checkpoint, saying it was listed late.
    listed_late_at = models.DateTimeField(null=True, blank=True)
    # The site poller's state for this row (rewind.checkpoints.poller), kept here so a poller
    # that dies mid-wait is replaced by one that knows where it stood.
    next_poll_at = models.DateTimeField(null=True, blank=True, editable=False)
    task_started_at = models.DateTimeField(
        null=True, blank=True, editable=False, help_text="The insert task's start, on the ZVM's clock."
    )
    task_completed_at = models.DateTimeField(null=True, blank=True, editable=False)
    outcome_unknown_since = models.DateTimeField(
        null=True, blank=True, editable=False, help_text="The insert call's answer was lost at this time."
    )
    reinserted = models.BooleanField(default=False, editable=False)
    # What the site's pacing learns from (``site_listing_times_s``): when the poller last saw
    # the list without our tag, and from that how long the ZVM took to list it. ``waited_ms``
    # is when we saw it, which includes our own lateness under load.
    last_miss_at = models.DateTimeField(null=True, blank=True, editable=False)
    listed_after_ms = models.PositiveIntegerField(null=True, blank=True, editable=False)
    # The retention forecast (rewind.checkpoints.retention): when the checkpoint leaves its
    # VPG's journal, after which no file can be recovered from it. Refreshed by a beat sweep.
    leaves_journal_at = models.DateTimeField(
        null=True,
        blank=True,
        db_index=True,
        help_text="Estimated time (our clock) the checkpoint leaves the VPG's journal; in the past once it has.",
    )
    journal_estimated_at = models.DateTimeField(
        null=True, blank=True, editable=False, help_text="When the estimate was last made."
    )
    journal_history_minutes = models.PositiveIntegerField(
        null=True, blank=True, editable=False, help_text="The journal history the estimate used."
    )
    left_journal_seen_at = models.DateTimeField(
        null=True,
        blank=True,
        editable=False,
        help_text="When the ZVM first showed the journal past this checkpoint: it has left for certain.",
    )
    retention_warned_at = models.DateTimeField(
        null=True, blank=True, editable=False, help_text="When the warning that it is about to leave was recorded."
    )

    class Meta:
        verbose_name = "tagged checkpoint"
        verbose_name_plural = "tagged checkpoints"
        ordering = ["guard_id", "vpg_name"]
        constraints = [
            models.UniqueConstraint(fields=["guard", "vpg_identifier"], name="guard_vpg_unique"),
        ]
        # The wait's pacing reads each site's newest listed rows (``site_listing_times_s``).
        indexes = [
            models.Index(fields=["site", "status", "-insert_started_at"], name="guard_vpg_site_history"),
            # The site poller's round reads every unfinished row of its site.
            models.Index(fields=["site", "status", "next_poll_at"], name="guard_vpg_site_poll"),
        ]

    def __str__(self) -> str:
        return f"{self.vpg_name}: {self.status}"

    def audit_data(self) -> dict[str, Any]:
        return {
            "vpg": self.vpg_name,
            "vpg_identifier": self.vpg_identifier,
            "tag": self.guard.tag,
            "checkpoint_identifier": self.checkpoint_identifier,
            "checkpoint_timestamp": self.checkpoint_timestamp.isoformat() if self.checkpoint_timestamp else None,
        }


# The name code uses for a guard's per-VPG row (see the class's docstring).
TaggedCheckpoint = ChangeGuardVpg


class SitePoller(models.Model):
    """Who polls one site's ZVM for every waiting tagged checkpoint, and when it runs next
    (``rewind.checkpoints.poller``). ``lease_owner`` and ``lease_expires_at`` hold its ``Lease``: an expired one
    means the chain died, and the next kick or sweep starts another."""

    site = models.OneToOneField("rewind.Site", on_delete=models.CASCADE, primary_key=True, related_name="poller")
    lease_owner = models.CharField(max_length=80, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    next_round_at = models.DateTimeField(null=True, blank=True)
    # A kick while a round runs cannot replace it: it leaves the time it needs here, and the
    # round schedules its successor no later than that.
    wanted_at = models.DateTimeField(null=True, blank=True)
    rounds = models.PositiveBigIntegerField(default=0)
    last_round_at = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True)

    class Meta:
        verbose_name = "site poller"
        verbose_name_plural = "site pollers"

    def __str__(self) -> str:
        return f"poller of site {self.site_id}"

    @property
    def lease(self) -> Lease:
        return Lease(self.lease_owner, self.lease_expires_at)
