"""What a restore in place tells the notification channels: its diff awaits the write-back click,
and how the write-back ended (verified, or why not). Each once per request (``dedupe_key``)."""

from __future__ import annotations

from typing import Any

from recoveries.models import RecoveryRequest, RestoreState
from recoveries.presenters import approval_url
from recoveries.selectors import recovery_site
from rewind.notifications.models import NotificationKind
from rewind.notifications.services import notification_send, notifying


def _sites(recovery: RecoveryRequest) -> list[str]:
    site = recovery_site(recovery)
    return [site.name] if site is not None else []


def restore_announce_awaiting(*, recovery: RecoveryRequest, request_id: str | None = None) -> None:
    """The file was pulled and compared: a person reads the diff and clicks Write back."""
    with notifying(f"recovery #{recovery.pk} awaits its write-back"):
        notification_send(
            kind=NotificationKind.RECOVERY_AWAITS_WRITE_BACK,
            dedupe_key=f"recovery:{recovery.pk}:awaits-write-back",
            title=f"[zerto-rewind] Recovery #{recovery.pk}: read the diff, then write {recovery.normalized_path} "
            f"back into {recovery.vm_name}",
            body="\n".join(
                [
                    f"The {'folder' if recovery.recursive else 'file'} {recovery.path} of VM {recovery.vm_name} was pulled from its checkpoint and compared "
                    "with the file in the guest now.",
                    "Nothing is written into the guest until a person has read the diff and clicked Write back:",
                    approval_url(recovery),
                ]
            ),
            sites=_sites(recovery),
            target=recovery,
            request_id=request_id,
        )


def restore_announce_finished(
    *, recovery: RecoveryRequest, state: str, message: str, request_id: str, files: list[dict[str, Any]]
) -> None:
    """How the write-back ended, in the caller's transaction; a folder's ``files`` each with their result."""
    verified = state == RestoreState.VERIFIED
    with notifying(f"recovery #{recovery.pk}'s write-back"):
        notification_send(
            kind=NotificationKind.RECOVERY_RESTORED if verified else NotificationKind.RECOVERY_NOT_RESTORED,
            dedupe_key=f"recovery:{recovery.pk}:restored",
            title=f"[zerto-rewind] Recovery #{recovery.pk}: {recovery.vm_name} {recovery.normalized_path} "
            + ("restored: verified" if verified else f"not restored ({state})"),
            body="\n".join(
                [
                    f"VM {recovery.vm_name}, {'folder' if recovery.recursive else 'file'} {recovery.path}, asked back by {recovery.requester}.",
                    f"restored: {message}",
                    *[f"  {row['path']}: {row['result'] or 'not written'}: {row['message']}" for row in files],
                    approval_url(recovery),
                ]
            ),
            sites=_sites(recovery),
            target=recovery,
            request_id=request_id,
        )
