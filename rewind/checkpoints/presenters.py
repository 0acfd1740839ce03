"""What guards and their tagged checkpoints look like to the outside: to an agent an answer (``GuardOut``:
may it proceed, and why not), over REST a record (``GuardRecordOut``), two contracts with a model each."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from pydantic import AliasPath, Field

from rewind.approvals.models import HeldCall
from rewind.approvals.presenters import HeldCallOut, held_call_out
from rewind.checkpoints.models import ChangeGuard, TaggedCheckpoint
from rewind.checkpoints.selectors import guard_progress
from rewind.checkpoints.services import GuardOutcome
from rewind.lib.rest.outputs import ROWS, OutputModel

# A checkpoint's retention forecast, as every answer that carries one describes it.
LEAVES_JOURNAL_AT_DOC = (
    "Estimated UTC time (ISO 8601) this checkpoint leaves the VPG's journal; after it, no file can be recovered "
    "from it. Refreshed every few minutes; null until estimated, or when the ZVM does not tell its journal history"
)
LEFT_JOURNAL_SEEN_AT_DOC = "Set once Zerto showed the checkpoint gone from the journal: it can no longer be recovered"


class VpgCheckpointOut(OutputModel):
    name: str
    identifier: str
    status: str = Field(description="pending, inserting, waiting, listed, failed, timed_out, or refused")
    checkpoint_identifier: str | None = None
    checkpoint_timestamp: datetime | None = Field(default=None, description="UTC, ISO 8601")
    error: str | None = None
    waited_ms: int | None = None
    recovery_site: str | None = None
    listed_late_at: datetime | None = Field(
        default=None,
        description="Zerto listed the checkpoint after this VPG timed out: usable to recover a file "
        "from, but the guard stays not ok",
    )
    leaves_journal_at: datetime | None = Field(default=None, description=LEAVES_JOURNAL_AT_DOC)
    left_journal_seen_at: datetime | None = Field(default=None, description=LEFT_JOURNAL_SEEN_AT_DOC)


class GuardOut(OutputModel):
    ok: bool = Field(
        description="True: you may make the change (every VPG lists the checkpoint, or the tool is not guarded)"
    )
    guarded: bool = Field(description="False: the tool is not in the mutating-tool catalog; nothing was checkpointed")
    finished: bool
    status: str = Field(description="ok, failed, pending, running, refused or pass_through")
    must_not_proceed: str | None = Field(
        default=None, description="Why you must not make the change, when you must not"
    )
    id: int | None = Field(default=None, description="The guard's id, for zerto_checkpoint_status")
    change_id: str | None = None
    tag: str | None = None
    vm: str | None = None
    vm_identifier: str | None = None
    tool: str | None = None
    catalog_entry: str | None = Field(default=None, description="The catalog entry that matched the tool")
    reused: bool = Field(
        default=False, description="An earlier request with the same change_id for this VM was returned"
    )
    listed: int = 0
    total: int = 0
    waiting_for: str | None = Field(
        default=None,
        description="Not finished: what the request is queued behind (a worker, or its site's request cap)",
    )
    vpgs: list[VpgCheckpointOut] = Field(default_factory=list)
    landed: list[VpgCheckpointOut] = Field(default_factory=list, description="The checkpoints that did land")
    decision: str | None = Field(
        default=None, description="checkpoint, or approve: once the checkpoints are listed, a person approves the call"
    )
    policy_version: int | None = Field(default=None, description="The policy version the decision was made under")
    held: HeldCallOut | None = Field(
        default=None, description="Decision approve: the call held for a person (ok is false until approved)"
    )
    note: str | None = None


def tagged_checkpoint_out(row: TaggedCheckpoint) -> VpgCheckpointOut:
    """One VPG's tagged checkpoint as an agent reads it."""
    return VpgCheckpointOut.of(
        row,
        name=row.vpg_name,
        identifier=row.vpg_identifier,
        checkpoint_identifier=row.checkpoint_identifier or None,
        error=row.error or None,
        recovery_site=row.recovery_site_name or None,
    )


def guard_report(guard: ChangeGuard, *, catalog_entry: str | None = None, reused: bool = False) -> GuardOut:
    """The guard as an agent reads it, read afresh: per VPG, and whether (and why not) to proceed."""
    guard.refresh_from_db()
    vpgs = [tagged_checkpoint_out(r) for r in TaggedCheckpoint.objects.filter(guard=guard).order_by("vpg_name")]
    finished = guard.status in (ChangeGuard.Status.OK, ChangeGuard.Status.FAILED)
    ok = guard.status == ChangeGuard.Status.OK
    landed = [v for v in vpgs if v.status == TaggedCheckpoint.Status.LISTED]
    waiting_for = None if finished else guard_progress(guard.pk).waiting_for
    if ok:
        reason = None
    elif finished:
        reason = f"the checkpoints are not all in place ({guard.error or 'failed'}); do not make the change"
    else:
        reason = (
            f"the checkpoints are not listed yet ({len(landed)}/{len(vpgs)} VPGs"
            + (f"; {waiting_for}" if waiting_for else "")
            + f"); do not make the change until zerto_checkpoint_status({guard.pk}) says ok"
        )
    return GuardOut.of(
        guard,  # its id, status, change_id, tag and vm_identifier
        ok=ok,
        guarded=True,
        finished=finished,
        must_not_proceed=reason,
        vm=guard.vm_name,
        tool=guard.tool or None,
        catalog_entry=catalog_entry,
        reused=reused,
        listed=len(landed),
        total=len(vpgs),
        waiting_for=waiting_for,
        vpgs=vpgs,
        landed=landed,
        decision=guard.decision,
        policy_version=guard.policy_version,
        held=None,  # not the row's held calls: ``guard_held`` sets the one the agent waits on
    )


def guard_out(outcome: GuardOutcome, tool: str | None = None) -> GuardOut:
    if not outcome.guarded:
        return GuardOut(
            ok=True,
            guarded=False,
            finished=True,
            status="pass_through",
            tool=tool,
            note=f"{tool} is not in the mutating-tool catalog, so no checkpoint was taken. If it can change a VM, "
            "add it with zerto_add_mutating_tool and guard again.",
        )
    if outcome.guard is None:
        refused = [
            VpgCheckpointOut(name=r.name, identifier=r.identifier, status="refused", error=r.reason)
            for r in outcome.refused
        ]
        return GuardOut(
            ok=False,
            guarded=True,
            finished=True,
            status="refused",
            must_not_proceed=outcome.refusal,
            change_id=outcome.change_id,
            vm=outcome.vm,
            tool=tool,
            catalog_entry=outcome.entry,
            vpgs=refused,
            total=len(refused),
        )
    return guard_report(outcome.guard, catalog_entry=outcome.entry, reused=not outcome.created)


def guard_held(out: GuardOut, held: HeldCall) -> GuardOut:
    """The guard's answer with the call it holds for a person: ``ok`` only once people approved it."""
    view = held_call_out(held)
    if held.state == HeldCall.State.APPROVED and out.ok:
        return out.model_copy(update={"held": view})
    status = "held" if held.state in HeldCall.OPEN else held.state
    return out.model_copy(
        update={
            "held": view,
            "ok": False,
            "status": status,
            "must_not_proceed": view.next,
            "finished": status != "held",
        }
    )


def guard_meta(out: GuardOut) -> dict[str, Any]:
    """The guard in a forwarded call's ``_meta``: which checkpoints it took, in brief."""
    return {
        "id": out.id,
        "ok": out.ok,
        "change_id": out.change_id,
        "tag": out.tag,
        "vm": out.vm,
        "checkpoints": [
            {"vpg": v.name, "checkpoint_identifier": v.checkpoint_identifier, "status": v.status} for v in out.vpgs
        ],
    }


class TaggedCheckpointRecordOut(OutputModel):
    rest_name = "TaggedCheckpoint"
    presents = TaggedCheckpoint

    vpg_name: str
    vpg_identifier: str
    status: str
    site: str | None = Field(default=None, validation_alias=AliasPath("site", "name"))
    protected_site_identifier: str
    recovery_site_identifier: str
    recovery_site_name: str
    task_id: str
    checkpoint_identifier: str
    checkpoint_timestamp: datetime | None
    listed_late_at: datetime | None
    error: str
    insert_started_at: datetime | None
    waited_ms: int | None
    leaves_journal_at: datetime | None
    journal_estimated_at: datetime | None
    journal_history_minutes: int | None
    left_journal_seen_at: datetime | None
    retention_warned_at: datetime | None


# A guard as ``selectors.guard_list`` annotates it: VPG counts and the first checkpoint to leave its journal.
class GuardRecordOut(OutputModel):
    rest_name = "Guard"
    presents = ChangeGuard

    id: int
    status: str
    agent_name: str
    tool: str
    action: str
    vm_name: str
    vm_identifier: str
    change_id: str
    tag: str
    error: str
    request_id: str
    timeout_s: int
    decision: str
    decision_reason: str
    policy_version: int | None
    requested_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    vpgs_total: int
    vpgs_listed: int
    leaves_journal_at: datetime | None = Field(description="The first of its checkpoints to leave its VPG's journal")


class GuardDetailOut(GuardRecordOut):
    vpgs: Annotated[list[TaggedCheckpointRecordOut], ROWS]
