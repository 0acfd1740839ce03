"""The wait: insert the tagged checkpoint on every VPG in parallel and wait until listed.

Runs inside the Celery task ``rewind.checkpoints.wait``. One thread per unfinished VPG row,
each with its own ZVM client (through the ZVM of the VPG's protected site; the clients of
one site share its token and connection pool) and its own DB connection. No transaction is held
across a ZVM call: every step is record the attempt → call → record the outcome, and every
record is a compare-and-swap on the row's status.

Repeat safety (a redelivered or re-queued task):
- the task first claims the guard's lease; a live lease held by another run → it does nothing;
- a ``pending`` row is moved to ``inserting`` (CAS, audited) *before* the insert call, so only
  one run ever inserts it;
- an ``inserting`` row without a task id (the run died mid-call, or the call's answer was
  lost) is never inserted again blindly: first the tag is looked for in the checkpoint list,
  then the ZVM's insert tasks for that VPG since the attempt (one not recorded on any row is
  adopted); only when neither exists ``SETTLE_S`` later is it inserted again, once per run;
- a row with a task id resumes polling that task.

Polling is paced by ``pacing``: the wait learns from the site's recent guards how long its
ZVM takes to list a checkpoint, sleeps until shortly before then, asks often around that
moment and less often past it (without history: small gaps growing with the time waited).
The deadline runs from the guard's request (the caller's ``timeout_s``), not from when a
worker picked it up.

A ZVM's clock may be minutes off ours, so every time sent to it is in its time: the
checkpoint list's ``startDate`` comes from the insert task's own ``Started`` once known,
before that from our insert time converted through the offset measured from the ``Date`` of
its answers (``rewind.zvm.clock``); the offset is stored on the site afterwards.
"""

from __future__ import annotations

import contextvars
import logging
import threading
import time
import uuid
from datetime import datetime, timedelta

from django.db import DatabaseError, connection, transaction
from django.db.models import F, Q, QuerySet
from django.db.models.functions import Coalesce
from django.utils import timezone

from rewind.audit import Actor, audit_record
from rewind.audit.actions import GuardAction
from rewind.checkpoints import pacing
from rewind.checkpoints.lease import LEASE_S, UNFINISHED
from rewind.checkpoints.models import ChangeGuard, TaggedCheckpoint
from rewind.checkpoints.selectors import site_listing_times_s
from rewind.checkpoints.zvmtasks import insert_tasks_since
from rewind.sites import site_client, site_clock_offset_s, site_record_clock
from rewind.zvm import Checkpoint, ZvmAuthError, ZvmClient, ZvmError, ZvmNotFoundError, ZvmRejectedError
from rewind.zvm.clock import from_zvm, to_zvm

logger = logging.getLogger(__name__)

FINAL = (TaggedCheckpoint.Status.LISTED, TaggedCheckpoint.Status.FAILED, TaggedCheckpoint.Status.TIMED_OUT)
NOT_FINAL = (TaggedCheckpoint.Status.PENDING, TaggedCheckpoint.Status.INSERTING, TaggedCheckpoint.Status.WAITING)
LIST_LOOKBACK = timedelta(minutes=1)
# An insert whose outcome is unknown is repeated only when, this long after we started
# wondering, the ZVM lists neither the tag nor an insert task for the VPG.
SETTLE_S = 5.0


def guard_wait(guard_id: int, lease_token: str | None = None) -> str:
    """Run (or resume) the wait of one guard. Returns what happened, for the task log."""
    run_id = f"run:{uuid.uuid4().hex}"
    if not _claim(guard_id, lease_token, run_id):
        return "skipped: finished, or another run holds the lease"
    guard = ChangeGuard.objects.get(pk=guard_id)
    # From the request, not the task start: time spent queued counts against the caller's timeout_s.
    remaining = (guard.requested_at + timedelta(seconds=guard.timeout_s) - timezone.now()).total_seconds()
    deadline = time.monotonic() + max(0.0, remaining)
    stop, lost = threading.Event(), threading.Event()
    beat = _start_thread(_heartbeat, guard_id, run_id, stop, lost)
    try:
        rows = [r.pk for r in guard.vpgs.all() if r.status not in FINAL]
        workers = [_start_thread(_vpg_run, pk, guard, deadline, lost) for pk in rows]
        for t in workers:
            t.join()
    finally:
        stop.set()
        beat.join()
    if lost.is_set():
        return "lease lost to another run"
    return _guard_finish(guard)


def _start_thread(target: object, *args: object) -> threading.Thread:
    # Threads do not inherit context variables; the request id must follow.
    ctx = contextvars.copy_context()
    thread = threading.Thread(target=ctx.run, args=(target, *args), daemon=True)
    thread.start()
    return thread


def _claim(guard_id: int, lease_token: str | None, run_id: str) -> bool:
    now = timezone.now()
    free = Q(lease_expires_at__isnull=True) | Q(lease_expires_at__lt=now)
    if lease_token:
        free |= Q(lease_owner=f"queued:{lease_token}")
    return bool(
        ChangeGuard.objects.filter(free, pk=guard_id, status__in=UNFINISHED).update(
            status=ChangeGuard.Status.RUNNING,
            started_at=Coalesce(F("started_at"), now),
            lease_owner=run_id,
            lease_expires_at=now + timedelta(seconds=LEASE_S),
            attempts=F("attempts") + 1,
        )
    )


def _heartbeat(guard_id: int, run_id: str, stop: threading.Event, lost: threading.Event) -> None:
    try:
        while not stop.wait(LEASE_S / 3):
            try:
                renewed = ChangeGuard.objects.filter(pk=guard_id, lease_owner=run_id).update(
                    lease_expires_at=timezone.now() + timedelta(seconds=LEASE_S)
                )
            except DatabaseError:
                logger.warning("guard %s: could not renew the lease; retrying", guard_id, exc_info=True)
                continue
            if not renewed:
                lost.set()
                return
    finally:
        connection.close()


def _vpg_run(row_id: int, guard: ChangeGuard, deadline: float, lost: threading.Event) -> None:
    try:
        _VpgWait(row_id, guard, deadline, lost).run()
    except Exception as exc:  # anything unforeseen must still end the row, or the guard hangs
        logger.exception("guard %s: the wait of VPG row %s failed", guard.pk, row_id)
        _row_finish(
            row_id, guard, TaggedCheckpoint.Status.FAILED, error=f"internal error while waiting ({type(exc).__name__})"
        )
    finally:
        connection.close()


class _VpgWait:
    def __init__(self, row_id: int, guard: ChangeGuard, deadline: float, lost: threading.Event) -> None:
        self.row = TaggedCheckpoint.objects.select_related("site").get(pk=row_id)
        self.guard = guard
        self.deadline = deadline
        self.lost = lost
        self.last_error = ""
        # Set while the row is "inserting" with no task id: the insert call's outcome is unknown.
        self.unknown_since: float | None = None
        self.reinserted = False
        self.task_started: datetime | None = None  # the insert task's start, on the ZVM's clock
        self.client: ZvmClient | None = None

    def run(self) -> None:
        site = self.row.site
        if site is None or not site.enabled:
            self.finish(
                TaggedCheckpoint.Status.FAILED, error="the protected site's ZVM is not configured (or is disabled) here"
            )
            return
        # Its own client object; ``site_client`` shares the site's token and connection pool
        # within this process, so three VPGs on one ZVM cost one login, and later guards none.
        client = self.client = site_client(site, request_id=self.guard.request_id)
        # A row an earlier run left behind may be listed already: look at once.
        resumed = self.row.status != TaggedCheckpoint.Status.PENDING
        if not resumed and not self.insert(client):
            return
        if self.row.status == TaggedCheckpoint.Status.INSERTING and not self.row.task_id and self.unknown_since is None:
            self.unknown_since = time.monotonic()  # left so by a run that died mid-insert
        try:
            self.poll(client, look_now=resumed)
        finally:
            site_record_clock(site=site, measured=client.clock_offset())

    # -- insert ------------------------------------------------------------------------
    def insert(self, client: ZvmClient) -> bool:
        """Record the attempt, insert, record the task id. False when the row is finished."""
        if time.monotonic() >= self.deadline:
            self.finish(TaggedCheckpoint.Status.TIMED_OUT, error="not inserted: the guard had already timed out")
            return False
        pending = TaggedCheckpoint.objects.filter(pk=self.row.pk, status=TaggedCheckpoint.Status.PENDING)
        if not self._mark_attempt(pending, retry=False):
            self.row.refresh_from_db()  # another run took it; follow what it recorded
            return self.row.status not in FINAL
        return self._call_insert(client)

    def _call_insert(self, client: ZvmClient) -> bool:
        try:
            task_id = client.insert_tagged_checkpoint(self.row.vpg_identifier, self.guard.tag)
        except (ZvmAuthError, ZvmNotFoundError) as exc:
            self.finish(TaggedCheckpoint.Status.FAILED, error=str(exc))
            return False
        except ZvmRejectedError as exc:
            self.finish(TaggedCheckpoint.Status.FAILED, error=f"the ZVM refused the checkpoint: {exc}")
            return False
        except ZvmError as exc:
            # The ZVM may have acted before the answer was lost: do not repeat the call;
            # resolve it by the tag and the ZVM's task list (``_resolve_unknown``).
            self.last_error = f"the insert call's outcome is unknown ({exc})"
            self.unknown_since = time.monotonic()
            TaggedCheckpoint.objects.filter(pk=self.row.pk).update(error=self.last_error[:2000])
            return True
        TaggedCheckpoint.objects.filter(pk=self.row.pk, status=TaggedCheckpoint.Status.INSERTING, task_id="").update(
            task_id=task_id, status=TaggedCheckpoint.Status.WAITING, error=""
        )
        self.row.refresh_from_db()
        self.unknown_since = None
        return True

    def _mark_attempt(self, rows: QuerySet[TaggedCheckpoint], *, retry: bool) -> bool:
        """CAS the row to "inserting" and audit the attempt, before the call (fail-closed)."""
        with transaction.atomic():
            won = rows.update(status=TaggedCheckpoint.Status.INSERTING, insert_started_at=timezone.now())
            if won:
                audit_record(
                    actor=Actor.agent(self.guard.agent_name),
                    action=GuardAction.CHECKPOINT_REQUESTED,
                    target=self.guard,
                    request_id=self.guard.request_id,
                    data={
                        "vpg": self.row.vpg_name,
                        "vpg_identifier": self.row.vpg_identifier,
                        "retry": retry,
                        "site": self.row.site.name if self.row.site else "",
                        "tag": self.guard.tag,
                    },
                )
        if won:
            self.row.refresh_from_db()
        return bool(won)

    def _resolve_unknown(self, client: ZvmClient, since: datetime) -> bool:
        """An insert whose outcome is unknown and whose tag is not listed: find its task, or
        insert again when the ZVM ran no insert task for this VPG. False: the row is finished.
        """
        tasks = insert_tasks_since(client, self.row.vpg_identifier, since)
        if tasks is None:
            return True  # cannot tell; keep looking for the tag
        claimed = set(
            TaggedCheckpoint.objects.filter(vpg_identifier=self.row.vpg_identifier, task_id__in=tasks).values_list(
                "task_id", flat=True
            )
        )
        free = [t for t in tasks if t not in claimed]
        if free:
            TaggedCheckpoint.objects.filter(
                pk=self.row.pk, status=TaggedCheckpoint.Status.INSERTING, task_id=""
            ).update(task_id=free[0], status=TaggedCheckpoint.Status.WAITING)
            self.row.refresh_from_db()
            self.unknown_since = None
            return True
        assert self.unknown_since is not None
        if self.reinserted or time.monotonic() - self.unknown_since < SETTLE_S:
            return True
        # No tag and no insert task: the call never reached the ZVM. Insert once more.
        self.reinserted = True
        rows = TaggedCheckpoint.objects.filter(
            pk=self.row.pk,
            status=TaggedCheckpoint.Status.INSERTING,
            task_id="",
            insert_started_at=self.row.insert_started_at,
        )
        if not self._mark_attempt(rows, retry=True):
            self.row.refresh_from_db()
            return self.row.status not in FINAL
        return self._call_insert(client)

    # -- wait --------------------------------------------------------------------------
    def offset_s(self) -> float:
        """The ZVM's clock minus ours: measured from its answers in this run, else as stored."""
        measured = self.client.clock_offset() if self.client is not None else None
        return measured.offset_s if measured is not None else site_clock_offset_s(self.row.site)

    def since(self, start: datetime) -> datetime:
        """The earliest time (on the ZVM's clock) our checkpoint or insert task can carry."""
        if self.task_started is not None:
            return self.task_started - LIST_LOOKBACK
        return to_zvm(start, self.offset_s()) - LIST_LOOKBACK

    def poll(self, client: ZvmClient, *, look_now: bool) -> None:
        start = self.row.insert_started_at or self.guard.started_at or timezone.now()
        fc = pacing.forecast(site_listing_times_s(self.row.site_id, limit=pacing.HISTORY))
        task_done = False
        while not self.lost.is_set():
            if not look_now:
                started = self.row.insert_started_at or start
                elapsed = (timezone.now() - started).total_seconds()
                if self.lost.wait(pacing.next_gap(elapsed, self.deadline - time.monotonic(), fc)):
                    return
            look_now = False
            self.row.refresh_from_db(fields=["status", "task_id", "insert_started_at"])
            if self.row.status in FINAL:
                return
            try:
                task_done = task_done or self._task_done(client)
                since = self.since(self.row.insert_started_at or start)
                if task_done or not self.row.task_id:
                    found = self._find_tag(client, since)
                    if found is not None:
                        self.finish(TaggedCheckpoint.Status.LISTED, checkpoint=found)
                        return
                    if not self.row.task_id and self.unknown_since is not None:
                        if not self._resolve_unknown(client, since):
                            return
            except _RowFailed as exc:
                self.finish(TaggedCheckpoint.Status.FAILED, error=str(exc))
                return
            if time.monotonic() >= self.deadline:
                self.finish(TaggedCheckpoint.Status.TIMED_OUT, error=self._timeout_reason(task_done))
                return

    def _task_done(self, client: ZvmClient) -> bool:
        if not self.row.task_id:
            return False
        try:
            task = client.get_task(self.row.task_id)
        except ZvmNotFoundError:
            return True  # the ZVM forgot the task (restart?): the checkpoint list decides
        except ZvmRejectedError as exc:
            if isinstance(exc, ZvmAuthError):
                self.last_error = str(exc)
                return False
            raise _RowFailed(f"reading the insert task failed: {exc}") from exc
        except ZvmError as exc:
            self.last_error = str(exc)
            return False
        self.task_started = task.started or self.task_started
        if task.failed:
            reason = task.complete_reason or "no reason given"
            raise _RowFailed(f"the ZVM's insert task ended in state {task.state}: {reason}")
        return task.completed

    def _find_tag(self, client: ZvmClient, since: datetime) -> Checkpoint | None:
        try:
            listed = client.list_checkpoints(self.row.vpg_identifier, start=since)
        except ZvmNotFoundError as exc:
            raise _RowFailed(f"the VPG is gone: {exc}") from exc
        except ZvmError as exc:  # transient, or a token that just expired: try again next poll
            self.last_error = str(exc)
            return None
        tag = self.guard.tag.strip()
        return next((cp for cp in listed if (cp.tag or "").strip() == tag), None)

    def _timeout_reason(self, task_done: bool) -> str:
        limit = f"within {self.guard.timeout_s} s"
        if not self.row.task_id:
            reason = f"the insert was interrupted and no checkpoint with the tag was listed {limit}"
        elif not task_done:
            reason = f"the ZVM's insert task did not complete {limit}"
        else:
            reason = f"the checkpoint was not listed {limit}"
        return f"{reason} (last error: {self.last_error})" if self.last_error else reason

    def finish(self, status: str, *, error: str = "", checkpoint: Checkpoint | None = None) -> None:
        _row_finish(self.row.pk, self.guard, status, error=error, checkpoint=checkpoint, offset_s=self.offset_s())


class _RowFailed(Exception):
    pass


def _row_finish(
    row_id: int,
    guard: ChangeGuard,
    status: str,
    *,
    error: str = "",
    checkpoint: Checkpoint | None = None,
    offset_s: float = 0.0,
) -> None:
    row = TaggedCheckpoint.objects.get(pk=row_id)
    start = row.insert_started_at or guard.started_at or timezone.now()
    waited_ms = max(0, int((timezone.now() - start).total_seconds() * 1000))
    with transaction.atomic():
        won = TaggedCheckpoint.objects.filter(pk=row_id, status__in=NOT_FINAL).update(
            status=status,
            error=error[:2000],
            checkpoint_identifier=(checkpoint.identifier or "") if checkpoint else "",
            checkpoint_timestamp=checkpoint.timestamp if checkpoint else None,
            waited_ms=waited_ms,
        )
        if won:
            audit_record(
                actor=Actor.system(),
                action=(
                    GuardAction.CHECKPOINT_LISTED
                    if status == TaggedCheckpoint.Status.LISTED
                    else GuardAction.CHECKPOINT_FAILED
                ),
                target=guard,
                request_id=guard.request_id,
                data={
                    "vpg": row.vpg_name,
                    "vpg_identifier": row.vpg_identifier,
                    "status": status,
                    "error": error,
                    "checkpoint_identifier": checkpoint.identifier if checkpoint else None,
                    "waited_ms": waited_ms,
                    "tag": guard.tag,
                    **_clock_data(checkpoint, offset_s),
                },
            )


def _clock_data(checkpoint: Checkpoint | None, offset_s: float) -> dict[str, object]:
    """The checkpoint's time as the ZVM shows it and on our clock (the audit's), and the offset."""
    if checkpoint is None or checkpoint.timestamp is None:
        return {"clock_offset_s": round(offset_s, 3)}
    return {
        "checkpoint_timestamp": checkpoint.timestamp.isoformat(),
        "checkpoint_time_ours": from_zvm(checkpoint.timestamp, offset_s).isoformat(),
        "clock_offset_s": round(offset_s, 3),
    }


def _guard_finish(guard: ChangeGuard) -> str:
    rows = list(TaggedCheckpoint.objects.filter(guard=guard))
    if any(r.status not in FINAL for r in rows):
        return "unfinished rows remain"
    ok = all(r.status == TaggedCheckpoint.Status.LISTED for r in rows)
    status = ChangeGuard.Status.OK if ok else ChangeGuard.Status.FAILED
    listed = TaggedCheckpoint.Status.LISTED
    error = "; ".join(f"VPG {r.vpg_name}: {r.error or r.status}" for r in rows if r.status != listed)
    with transaction.atomic():
        won = ChangeGuard.objects.filter(pk=guard.pk, status=ChangeGuard.Status.RUNNING).update(
            status=status, error=error[:4000], finished_at=timezone.now(), lease_owner="", lease_expires_at=None
        )
        if won:
            audit_record(
                actor=Actor.system(),
                action=GuardAction.OK if ok else GuardAction.FAILED,
                target=guard,
                request_id=guard.request_id,
                data={
                    "status": status,
                    "error": error,
                    "listed": [r.vpg_name for r in rows if r.status == TaggedCheckpoint.Status.LISTED],
                    "not_listed": [r.vpg_name for r in rows if r.status != TaggedCheckpoint.Status.LISTED],
                },
            )
    return status
