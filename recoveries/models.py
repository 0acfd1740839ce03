"""Recovery requests, their approvals, and every FLR session this service opened. State changes happen only in the
services (compare-and-swaps); the admin shows these rows read-only.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import models


class RestoreState(models.TextChoices):
    COMPARING = "comparing", "reading the file in the guest"
    AWAITING = "awaiting", "diff shown; awaiting the write-back click"
    GUARDING = "guarding", "taking a checkpoint before the write-back"
    WRITING = "writing", "writing and reading back"
    VERIFIED = "verified", "written and verified"
    DIFFERS = "differs", "written, but the guest gives back other bytes"
    NOT_WRITTEN = "not_written", "not written"
    FAILED = "failed", "the write failed; the file may be partly written"


class RecoveryRequest(models.Model):
    """One guest file asked back from one checkpoint of one VM; runs only once approved. Asked by an agent
    (``agent``) or a person (``requested_by``); ``requester`` names which, wherever who asked is shown."""

    class Status(models.TextChoices):
        PENDING = "pending"  # waiting for a human
        APPROVED = "approved"  # queued for the runner
        WAITING = "waiting", "Waiting for its site"  # approved; its recovery site is unavailable: runs when it answers
        DENIED = "denied"
        EXPIRED = "expired"  # nobody approved in time
        RUNNING = "running"  # mounting / downloading / unmounting
        SUCCEEDED = "succeeded"  # the bytes landed (the unmount may still have failed: see result)
        FAILED = "failed"
        # A restore in place: the bytes landed and the file in the guest is compared; a person must confirm.
        CONFIRM = "confirm", "Awaiting write-back confirmation"
        RESTORING = "restoring", "Writing back into the guest"  # guard, write, read back

    class Os(models.TextChoices):
        LINUX = "linux"
        WINDOWS = "windows"

    class CheckpointSource(models.TextChoices):
        CHANGE_ID = "change_id"
        TAG = "tag"
        CHECKPOINT_ID = "checkpoint_id"
        LATEST_TAGGED = "latest_tagged"  # default: the newest tagged checkpoint this service made
        BEFORE_CALL = "before_call"  # undo: the newest journal checkpoint before a gateway call
        POINT_IN_TIME = "point_in_time"  # undo: the newest journal checkpoint before a time

    FINISHED = (Status.DENIED, Status.EXPIRED, Status.SUCCEEDED, Status.FAILED)
    # No mount is made any more: a restore in place goes on without one.
    FLR_OVER = (*FINISHED, Status.CONFIRM, Status.RESTORING)

    agent = models.ForeignKey(
        "rewind.Agent", null=True, blank=True, on_delete=models.SET_NULL, related_name="recoveries"
    )
    agent_name = models.CharField(max_length=64, db_index=True, blank=True, help_text="Empty when a person asked.")
    # A person's request: who asked (the name stays when the account is deleted); may not approve it.
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="recoveries_asked",
    )
    requested_by_name = models.CharField(max_length=150, blank=True, db_index=True)
    vm_identifier = models.CharField(max_length=255, db_index=True)
    vm_name = models.CharField(max_length=255)
    path = models.CharField(max_length=1024, help_text="The guest path as it was asked for.")
    normalized_path = models.CharField(max_length=1024, help_text="Linux: /a/b; Windows: C:/a/b.")
    os = models.CharField(max_length=10, choices=Os.choices)
    reason = models.TextField()
    recursive = models.BooleanField(
        default=False, help_text="A folder asked back with everything under it (recoveries.folders)."
    )

    checkpoint_identifier = models.CharField(max_length=64)
    checkpoint_timestamp = models.DateTimeField(null=True, blank=True)
    checkpoint_tag = models.CharField(max_length=255, blank=True)
    change_id = models.CharField(max_length=100, blank=True)
    checkpoint_source = models.CharField(max_length=20, choices=CheckpointSource.choices)
    # An undo: the gateway call (or the time) the checkpoint was chosen before, and by how much.
    undo_call_id = models.CharField(max_length=40, blank=True)
    undo_before = models.DateTimeField(null=True, blank=True, help_text="The moment undone, on our clock.")
    undo_before_by_s = models.FloatField(null=True, blank=True)
    checkpoint_listed_late_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="Set when the checkpoint was listed only after its guard had timed out (the guard stayed not ok).",
    )
    vpg_identifier = models.CharField(max_length=64)
    vpg_name = models.CharField(max_length=255)
    recovery_site_identifier = models.CharField(max_length=64)
    recovery_site_name = models.CharField(max_length=255, blank=True)

    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING, db_index=True)
    approvals_required = models.PositiveSmallIntegerField(default=1)
    expires_at = models.DateTimeField(db_index=True)
    request_id = models.CharField(max_length=64, blank=True, db_index=True)

    # Result
    ok = models.BooleanField(null=True, blank=True)
    sha256 = models.CharField(max_length=64, blank=True)
    size = models.BigIntegerField(null=True, blank=True)
    stored_path = models.CharField(max_length=2048, blank=True, help_text="Where the recovered bytes are kept.")
    flr_path = models.CharField(max_length=2048, blank=True, help_text="The path inside the FLR mount.")
    # A folder: one entry per file brought back, in the order walked (a later step iterates it):
    # {path (below the folder, '/'-separated), size, sha256, modified (the ZVM's LastWriteTime or null)}.
    # ``stored_path``, ``sha256`` and ``size`` are then those of the zip archive holding them.
    manifest = models.JSONField(default=list, blank=True, help_text="A folder: the files brought back.")
    # A folder: what it listed that could not be brought back ({path, reason}), e.g. a link.
    manifest_skipped = models.JSONField(default=list, blank=True, help_text="A folder: entries not brought back.")
    unmount_ok = models.BooleanField(null=True, blank=True)
    unmount_session_id = models.CharField(max_length=255, blank=True)
    unmount_warning = models.TextField(blank=True)
    error = models.TextField(blank=True)
    # While waiting: since when the recovery site has been unavailable, and its last failure.
    site_unavailable_since = models.DateTimeField(
        null=True, blank=True, help_text="While waiting: since when the recovery site has been unavailable."
    )
    site_unavailable_reason = models.TextField(blank=True)
    # While waiting: when its run was queued again (its site answers), so overlapping sweeps queue it once.
    resume_queued_at = models.DateTimeField(null=True, blank=True, editable=False)
    # A restore in place (recoveries.restore): the file is written back into the guest once a person
    # has seen how it differs from the file there now, and read back to verify it.
    restore = models.BooleanField(default=False, help_text="Write the file back into the guest once confirmed.")
    restore_state = models.CharField(max_length=12, choices=RestoreState.choices, blank=True)
    restore_message = models.TextField(blank=True, help_text="What the write-back found, in one sentence.")
    current_sha256 = models.CharField(
        max_length=64, blank=True, help_text="The file in the guest before the write-back."
    )
    current_size = models.BigIntegerField(null=True, blank=True)
    current_error = models.TextField(blank=True, help_text="Why the file in the guest could not be read.")
    compared_at = models.DateTimeField(null=True, blank=True, help_text="When the diff was produced.")
    confirmed_by = models.CharField(max_length=150, blank=True)
    confirmed_at = models.DateTimeField(null=True, blank=True)
    restore_guard = models.ForeignKey(
        "rewind.ChangeGuard", null=True, blank=True, on_delete=models.SET_NULL, related_name="restores"
    )
    written_sha256 = models.CharField(max_length=64, blank=True, help_text="What the reader gave back after the write.")
    # A folder restored in place: one entry per manifest file, in manifest order (recoveries.restore.files):
    # {path, guest_path, change (unchanged/changed/new), current_sha256, current_size, current_error,
    #  result ("" until decided, then verified/differs/not_written/failed/skipped), message, read_back_sha256}.
    restore_files = models.JSONField(default=list, blank=True, help_text="A folder: each file's comparison and result.")
    # When a step of the restore last ran: a step whose next message was lost is queued again after a while.
    restore_step_at = models.DateTimeField(null=True, blank=True, editable=False)
    purged_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="When the recovered bytes were deleted after REWIND_RECOVERED_RETENTION_DAYS; sha256 and size remain.",
    )

    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    decided_at = models.DateTimeField(null=True, blank=True)
    decided_by = models.CharField(max_length=150, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        permissions = [("approve_recovery", "Can approve or deny file recoveries")]

    def __str__(self) -> str:
        return f"#{self.pk} {self.vm_name}:{self.path}"

    @property
    def is_expired_now(self) -> bool:
        from django.utils import timezone

        return self.expires_at <= timezone.now()

    @property
    def requester(self) -> str:
        """Who asked, as every page and message names them: "agent fixer" or "person alice"."""
        if self.requested_by_name:
            return f"person {self.requested_by_name}"
        return f"agent {self.agent_name}"

    @property
    def file_name(self) -> str:
        return self.normalized_path.rstrip("/").rsplit("/", 1)[-1]

    def audit_data(self) -> dict[str, Any]:
        return {
            "vm": self.vm_name,
            "vm_identifier": self.vm_identifier,
            "path": self.normalized_path,
            "vpg": self.vpg_name,
            "vpg_identifier": self.vpg_identifier,
            "recovery_site": self.recovery_site_name or self.recovery_site_identifier,
            "checkpoint": self.checkpoint_identifier,
            "checkpoint_time": self.checkpoint_timestamp.isoformat() if self.checkpoint_timestamp else None,
            "tag": self.checkpoint_tag,
            "change_id": self.change_id,
            "source": self.checkpoint_source,
            "checkpoint_listed_late": self.checkpoint_listed_late_at is not None,
            "undo_call_id": self.undo_call_id,
            "undo_before": self.undo_before.isoformat() if self.undo_before else None,
            "undo_before_by_s": self.undo_before_by_s,
            "reason": self.reason,
            # Only a person's request says so: an agent's is named by the audit row's actor as it always was.
            **({"requested_by": self.requested_by_name} if self.requested_by_name else {}),
            "expires_at": self.expires_at.isoformat(),
            # Only a folder says so: a file's request reads as it always did.
            **({"recursive": True} if self.recursive else {}),
            "restore_in_place": self.restore,
        }


class RecoveryApproval(models.Model):
    """One human's approval of a request; two distinct ones when a second approver is required."""

    recovery = models.ForeignKey(RecoveryRequest, on_delete=models.CASCADE, related_name="approvals")
    approver = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="recovery_approvals")
    approver_name = models.CharField(max_length=150)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["created_at"]
        constraints = [
            models.UniqueConstraint(fields=["recovery", "approver"], name="recovery_approval_once_per_user"),
        ]

    def __str__(self) -> str:
        return f"{self.approver_name} approved #{self.recovery_id}"


class RecoveryWriteBackConfirmation(models.Model):
    """One person's write-back click on a restore in place, naming the diff they were shown; recorded even when one
    click suffices, so every page says who confirmed which diff."""

    recovery = models.ForeignKey(RecoveryRequest, on_delete=models.CASCADE, related_name="write_back_confirmations")
    person = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="recovery_write_back_confirmations"
    )
    person_name = models.CharField(max_length=150)
    diff_token = models.CharField(max_length=64, help_text="The diff the person was shown (restore.diff_token).")
    at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["at", "pk"]
        constraints = [
            models.UniqueConstraint(fields=["recovery", "person"], name="recovery_write_back_confirmed_once_per_user"),
        ]

    def __str__(self) -> str:
        return f"{self.person_name} confirmed the write-back of #{self.recovery_id}"


class FlrSession(models.Model):
    """An FLR session this service opened (or tried to), recorded before the mount call. ``session_id`` stays empty
    when the ZVM's answer could not be read; ``snapshot_ids`` (the VM's live sessions just before the mount)
    then let the reaper find it: same VM, VPG and checkpoint, absent from the snapshot."""

    class Status(models.TextChoices):
        MOUNTING = "mounting"  # the mount call is being made
        UNKNOWN = "unknown"  # the mount may have started but its id is not known yet
        MOUNTED = "mounted"
        UNMOUNTING = "unmounting"  # unmount accepted; waiting for the ZVM to drop it
        UNMOUNT_FAILED = "unmount_failed"  # still mounted; the reaper tries again
        ENDED = "ended"

    LIVE = (Status.MOUNTING, Status.UNKNOWN, Status.MOUNTED, Status.UNMOUNTING, Status.UNMOUNT_FAILED)

    site = models.ForeignKey("rewind.Site", on_delete=models.PROTECT, related_name="flr_sessions")
    recovery = models.ForeignKey(
        RecoveryRequest, null=True, blank=True, on_delete=models.SET_NULL, related_name="sessions"
    )
    session_id = models.CharField(max_length=255, blank=True, db_index=True)
    vm_identifier = models.CharField(max_length=255)
    vpg_identifier = models.CharField(max_length=64)
    checkpoint_identifier = models.CharField(max_length=64)
    snapshot_ids = models.JSONField(default=list, help_text="Live session ids of the VM just before the mount.")
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.MOUNTING, db_index=True)
    attempt = models.PositiveSmallIntegerField(default=1)
    created_at = models.DateTimeField(auto_now_add=True)
    mounted_at = models.DateTimeField(null=True, blank=True)
    unmount_requested_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    end_reason = models.CharField(max_length=500, blank=True)
    last_error = models.TextField(blank=True)

    class Meta:
        ordering = ["-created_at"]
        verbose_name = "FLR session"
        verbose_name_plural = "FLR sessions"
        constraints = [
            models.UniqueConstraint(
                fields=["site", "session_id"], condition=~models.Q(session_id=""), name="flr_session_unique_per_site"
            ),
            # A second runner of the same recovery cannot record (and so cannot make) the same mount.
            models.UniqueConstraint(fields=["recovery", "attempt"], name="flr_session_one_per_attempt"),
        ]
        permissions = [("end_flr_session", "Can end any FLR session by hand")]

    def __str__(self) -> str:
        return self.session_id or f"unknown session #{self.pk}"

    def audit_data(self) -> dict[str, Any]:
        return {
            "site": self.site.name if self.site_id else "",
            "session_id": self.session_id or "unknown",
            "vm_identifier": self.vm_identifier,
            "vpg_identifier": self.vpg_identifier,
            "checkpoint": self.checkpoint_identifier,
            "recovery": self.recovery_id,
        }


class FlrSiteListing(models.Model):
    """What one site's ZVM listed last: its live FLR sessions, ours and others'. Written by every full listing
    (each reaper sweep, the live-sessions page, ``zerto_list_flr_sessions``), so ``/metrics`` and the dashboard
    show others' sessions without asking every ZVM on each page view."""

    site = models.OneToOneField("rewind.Site", on_delete=models.CASCADE, primary_key=True, related_name="flr_listing")
    listed_at = models.DateTimeField()
    live_ours = models.PositiveIntegerField(help_text="Live sessions listed that this service recorded.")
    live_foreign = models.PositiveIntegerField(help_text="Live sessions listed that someone else opened.")
    # [{session_id, status, vm_identifier, vpg_identifier, checkpoint_identifier, mount_time}], as listed.
    foreign = models.JSONField(default=list, blank=True, help_text="The live sessions someone else opened.")

    class Meta:
        verbose_name = "FLR site listing"

    def __str__(self) -> str:
        return f"{self.site_id}: {self.live_ours} ours, {self.live_foreign} foreign at {self.listed_at:%Y-%m-%d %H:%M}"


class ReaperSweep(models.Model):
    """One run of the reaper: when, for how long, and its report; sweeps older than ``reaper.SWEEPS_KEPT`` are
    pruned by the next one."""

    started_at = models.DateTimeField(db_index=True)
    finished_at = models.DateTimeField()
    report = models.JSONField(default=dict, help_text="The counts of ReapReport and the sites it could not sweep.")
    acted = models.BooleanField(
        default=False, db_index=True, help_text="It unmounted, ended, expired, failed or purged something."
    )

    class Meta:
        ordering = ["-started_at"]
        verbose_name = "reaper sweep"
        verbose_name_plural = "reaper sweeps"

    def __str__(self) -> str:
        return f"reaper sweep at {self.started_at:%Y-%m-%d %H:%M:%S}"


# A restore in place's tools per upstream and platform; defined beside the rows that use it.
from recoveries.restore.models import GuestFileTools  # noqa: E402, F401
