"""What guards tell the notification channels: a guard failed or timed out, or its checkpoint is leaving the
journal, once each. The sites named are the protected sites whose ZVMs took the inserts, so their own channels
hear it too.
"""

from __future__ import annotations

from django.conf import settings
from django.urls import reverse

from rewind.checkpoints.models import ChangeGuard, TaggedCheckpoint
from rewind.notifications.models import NotificationKind
from rewind.notifications.services import notification_send, notifying
from rewind.sites.models import Site


def guard_announce_failed(*, guard: ChangeGuard, rows: list[TaggedCheckpoint]) -> None:
    """Tell every channel that the guard failed; called in the transaction that ends it, which it never fails."""
    with notifying(f"guard #{guard.pk} failed"):
        _announce_failed(guard, rows)


def _announce_failed(guard: ChangeGuard, rows: list[TaggedCheckpoint]) -> None:
    listed = TaggedCheckpoint.Status.LISTED
    site_ids = {r.site_id for r in rows if r.site_id}
    sites = list(Site.objects.filter(pk__in=site_ids).values_list("name", flat=True)) if site_ids else []
    what = "timed out" if any(r.status == TaggedCheckpoint.Status.TIMED_OUT for r in rows) else "failed"
    lines = [
        f"The guard of agent {guard.agent_name} on VM {guard.vm_name} {what}: the agent was told not to proceed.",
        f"Action:  {guard.tool + ': ' if guard.tool else ''}{guard.action}",
        f"Tag:     {guard.tag}",
        "",
        *(f"VPG {r.vpg_name}: {r.status}" + (f" ({r.error})" if r.error else "") for r in rows if r.status != listed),
        *(f"VPG {r.vpg_name}: listed" for r in rows if r.status == listed),
        "",
        f"Guard: {settings.REWIND_PUBLIC_URL}{reverse('admin:rewind_changeguard_change', args=[guard.pk])}",
    ]
    notification_send(
        kind=NotificationKind.GUARD_FAILED,
        dedupe_key=f"guard:{guard.pk}:failed",
        title=f"[zerto-rewind] Guard {what}: {guard.vm_name} (agent {guard.agent_name})",
        body="\n".join(lines),
        sites=sites,
        target=guard,
        request_id=guard.request_id or None,
    )


def checkpoint_announce_leaving_journal(*, row: TaggedCheckpoint) -> None:
    """Tell every channel a guard's checkpoint is about to leave its VPG's journal; called in the
    transaction that records the warning, which it never fails. Once per row (the dedupe key)."""
    with notifying(f"the retention warning of tagged checkpoint #{row.pk}"):
        _announce_leaving(row)


def _announce_leaving(row: TaggedCheckpoint) -> None:
    guard = row.guard
    when = row.leaves_journal_at.isoformat().replace("+00:00", "Z") if row.leaves_journal_at else "unknown"
    lines = [
        f"The checkpoint guard #{guard.pk} took of VM {guard.vm_name} on VPG {row.vpg_name} leaves the journal "
        f"at about {when}; after that no file can be recovered from it.",
        f"Change:  {guard.change_id} by agent {guard.agent_name}",
        f"Tag:     {guard.tag}",
        "",
        f"Guard: {settings.REWIND_PUBLIC_URL}{reverse('admin:rewind_changeguard_change', args=[guard.pk])}",
    ]
    notification_send(
        kind=NotificationKind.CHECKPOINT_LEAVING_JOURNAL,
        dedupe_key=f"guard:{guard.pk}:vpg:{row.pk}:leaves-journal",
        title=f"[zerto-rewind] Checkpoint of {guard.vm_name} leaves the journal at about {when}",
        body="\n".join(lines),
        sites=[row.site.name] if row.site else [],
        target=guard,
        request_id=guard.request_id or None,
    )
