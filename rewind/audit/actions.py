"""Every audit action code, in one place, one ``StrEnum`` per part.

The codes are stored in the hash-chained log and filtered on by operators, so they are written out in full and
never assembled at run time. Rows written before this module used ``checkpoint.*`` for what is now
``guard.checkpoint.*``; the chain keeps them as written.
"""

from __future__ import annotations

from enum import StrEnum


class AgentAction(StrEnum):
    CREATED = "agent.created"
    CHANGED = "agent.changed"
    TOKEN_ISSUED = "agent.token.issued"
    TOKEN_REVOKED = "agent.token.revoked"


class OAuthAction(StrEnum):
    GRANT_CREATED = "oauth.grant.created"
    GRANT_REVOKED = "oauth.grant.revoked"


class SiteAction(StrEnum):
    CREATED = "site.created"
    CHANGED = "site.changed"
    IDENTITY_LEARNED = "site.identity_learned"
    UNAVAILABLE = "site.unavailable"
    AVAILABLE = "site.available"


class CatalogAction(StrEnum):
    TOOL_ADDED = "catalog.tool.added"
    TOOL_CHANGED = "catalog.tool.changed"
    TOOL_REMOVED = "catalog.tool.removed"
    SIGHTING_CLASSIFIED_MUTATING = "catalog.sighting.classified_mutating"
    SIGHTING_CLASSIFIED_READONLY = "catalog.sighting.classified_readonly"


class GuardAction(StrEnum):
    CREATED = "guard.created"
    PASS_THROUGH = "guard.pass_through"
    REFUSED = "guard.refused"
    RESUMED = "guard.resumed"
    OK = "guard.ok"
    FAILED = "guard.failed"
    CHECKPOINT_REQUESTED = "guard.checkpoint.requested"
    CHECKPOINT_LISTED = "guard.checkpoint.listed"
    CHECKPOINT_FAILED = "guard.checkpoint.failed"
    CHECKPOINT_LISTED_LATE = "guard.checkpoint.listed_late"
    CHECKPOINT_RETENTION_WARNING = "guard.checkpoint.retention_warning"
    CHECKPOINT_LEFT_JOURNAL = "guard.checkpoint.left_journal"


class RecoveryAction(StrEnum):
    REQUESTED = "recoveries.request.requested"
    APPROVED = "recoveries.request.approved"
    DENIED = "recoveries.request.denied"
    EXPIRED = "recoveries.request.expired"
    STARTED = "recoveries.request.started"
    WAITING_FOR_SITE = "recoveries.request.waiting_for_site"
    RESUMED = "recoveries.request.resumed"
    SUCCEEDED = "recoveries.request.succeeded"
    FAILED = "recoveries.request.failed"
    NOTIFIED = "recoveries.request.notified"
    NOTIFY_FAILED = "recoveries.request.notify_failed"
    FILE_DOWNLOADED = "recoveries.file.downloaded"
    FOLDER_DOWNLOADED = "recoveries.folder.downloaded"
    RESULT_PURGED = "recoveries.result.purged"
    SESSION_MOUNT_REQUESTED = "recoveries.session.mount_requested"
    SESSION_MOUNT_FAILED = "recoveries.session.mount_failed"
    SESSION_MOUNTED = "recoveries.session.mounted"
    SESSION_UNMOUNT_REQUESTED = "recoveries.session.unmount_requested"
    SESSION_UNMOUNT_FAILED = "recoveries.session.unmount_failed"
    SESSION_UNMOUNTED = "recoveries.session.unmounted"
    SESSION_VANISHED = "recoveries.session.vanished"
    SESSION_REAPED = "recoveries.session.reaped"
    SESSION_ENDED_BY_HAND = "recoveries.session.ended_by_hand"
    RESTORE_COMPARED = "recoveries.restore.compared"
    RESTORE_CONFIRMED = "recoveries.restore.confirmed"
    RESTORE_GUARDED = "recoveries.restore.guarded"
    RESTORE_FINISHED = "recoveries.restore.finished"
    RESTORE_TOOLS_SET = "recoveries.restore_tools.set"
    RESTORE_TOOLS_REMOVED = "recoveries.restore_tools.removed"


class NotificationAction(StrEnum):
    # The approver e-mail keeps its own codes (``recoveries.request.notified`` / ``notify_failed``).
    SENT = "notification.sent"
    FAILED = "notification.failed"
    TEST_REQUESTED = "notification.test_requested"


class GatewayAction(StrEnum):
    UPSTREAM_CREATED = "gateway.upstream.created"
    UPSTREAM_CHANGED = "gateway.upstream.changed"
    UPSTREAM_REMOVED = "gateway.upstream.removed"
    TOOLS_LISTED = "gateway.upstream.tools_listed"
    TOOLS_LIST_FAILED = "gateway.upstream.tools_list_failed"
    TOOL_POLICY_CHANGED = "gateway.tool.policy_changed"
    TOOL_DEFINITION_APPROVED = "gateway.tool.definition_approved"
    CALL_DECIDED = "gateway.call.decided"
    UPSTREAM_ASKED = "gateway.upstream.asked"  # it sent a request toward the agent's side (sampling, ...)


class PolicyAction(StrEnum):
    VERSION_RAISED = "policy.version.raised"
    RULE_ADDED = "policy.rule.added"
    RULE_CHANGED = "policy.rule.changed"
    RULE_REMOVED = "policy.rule.removed"
    STOP_ENGAGED = "policy.stop.engaged"
    STOP_LIFTED = "policy.stop.lifted"
    STOP_REFUSED = "policy.stop.refused"  # a guard or a gateway call the stop refused


class ApprovalAction(StrEnum):
    """A call held for a person (``rewind.approvals``): held, decided, then released once or refused."""

    HELD = "approval.call.held"
    APPROVED = "approval.call.approved"  # one person's approval; ``complete`` says whether enough agreed
    DENIED = "approval.call.denied"
    EXPIRED = "approval.call.expired"
    RELEASED = "approval.call.released"  # the approved arguments went to the upstream, once
    REFUSED = "approval.call.refused"  # approved, but not released: the policy, a checkpoint, a stop, ...
    FINISHED = "approval.call.finished"  # how the released call ended upstream


class McpAction(StrEnum):
    TOOL_CALLED = "mcp.tool.called"


class AuditLogAction(StrEnum):
    """A check of the chain itself (``manage.py audit_verify``), kept in the chain it checked."""

    CHAIN_VERIFIED = "audit.chain.verified"
    CHAIN_BROKEN = "audit.chain.broken"


class SignInAction(StrEnum):
    """People signing in to the admin (django-axes counts the failures; ``rewind.signin``)."""

    LOCKED_OUT = "signin.locked_out"
