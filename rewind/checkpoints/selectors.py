"""Reads of guards and their tagged checkpoints (database only, never a ZVM): querysets for REST and the admin, a
guard's progress, and what the retention forecast knows of a checkpoint.
"""

from __future__ import annotations

import functools
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, cast

from django.db import connection
from django.db.models import (
    Count,
    DurationField,
    Exists,
    ExpressionWrapper,
    F,
    Min,
    OuterRef,
    Prefetch,
    Q,
    QuerySet,
    Subquery,
    Sum,
)
from django.utils import timezone

from rewind.checkpoints.models import ChangeGuard, TaggedCheckpoint, deadline_of
from rewind.lib import bulk
from rewind.lib.errors import NotFoundError
from rewind.workers.selectors import broker_outage_describe, broker_outage_open, workers_seen

# After this long without a worker picking a guard up, its waiting caller is told so, with the workers' state.
NO_WORKER_AFTER_S = 10.0


@dataclass(frozen=True)
class GuardProgress:
    """One cheap read for progress notifications."""

    status: str
    listed: int
    total: int
    deadline: datetime | None  # the guard's own: its request time plus its timeout
    waiting_for: str | None  # what it is queued behind, when it is not yet waiting on the ZVM


def guard_progress(guard_id: int, now: datetime | None = None) -> GuardProgress:
    now = now or timezone.now()
    guard = ChangeGuard.objects.filter(pk=guard_id).first()
    if guard is None:
        return GuardProgress(status="", listed=0, total=0, deadline=None, waiting_for=None)
    rows = list(TaggedCheckpoint.objects.filter(guard_id=guard_id).values_list("status", "site_id", "site__name"))
    listed = sum(1 for status, _, _ in rows if status == TaggedCheckpoint.Status.LISTED)
    deadline = guard.deadline
    return GuardProgress(
        status=guard.status,
        listed=listed,
        total=len(rows),
        deadline=deadline,
        waiting_for=guard_waiting_for(guard, rows, now),
    )


def guard_tally(guard_id: int) -> GuardProgress:
    """A guard's status, deadline and VPGs listed, without what it is queued behind; ``guard_tallies``."""
    return guard_tallies(frozenset([guard_id]))[guard_id]


def guard_tallies(guard_ids: Collection[int]) -> dict[int, GuardProgress]:
    """Each guard's status, deadline and VPGs listed, in one statement for them all, without what it is queued
    behind; a guard that does not exist has the status "".

    What waiting calls read, so the calls of a process read together (``rewind.mcp.context.SharedReads``); the
    statement is written out, as building it through the ORM on every read cost most of a replica's CPU for
    these reads (measured: see the benchmarks page).
    """
    ids = sorted(set(guard_ids))
    tallies = {gid: GuardProgress(status="", listed=0, total=0, deadline=None, waiting_for=None) for gid in ids}
    if not ids:
        return tallies
    with connection.cursor() as cursor:
        cursor.execute(_tally_sql(len(ids)), [TaggedCheckpoint.Status.LISTED, *ids])
        found = cursor.fetchall()
    for gid, status, requested_at, timeout_s, total, listed in found:
        if timezone.is_naive(requested_at):  # SQLite keeps UTC without saying so; PostgreSQL says it
            requested_at = timezone.make_aware(requested_at, UTC)
        tallies[gid] = GuardProgress(
            status=status,
            listed=int(listed or 0),
            total=int(total),
            deadline=deadline_of(requested_at, timeout_s),
            waiting_for=None,
        )
    return tallies


def _tally_sql(count: int) -> str:
    quote = connection.ops.quote_name
    guards, vpgs = quote(ChangeGuard._meta.db_table), quote(TaggedCheckpoint._meta.db_table)
    gid, status, requested_at, timeout_s = (f"g.{quote(c)}" for c in ("id", "status", "requested_at", "timeout_s"))
    return (
        f"SELECT {gid}, {status}, {requested_at}, {timeout_s}, COUNT(v.{quote('id')}), "
        f"SUM(CASE WHEN v.{quote('status')} = %s THEN 1 ELSE 0 END) "
        f"FROM {guards} g LEFT JOIN {vpgs} v ON v.{quote('guard_id')} = {gid} "
        f"WHERE {gid} IN ({', '.join(['%s'] * count)}) GROUP BY {gid}, {status}, {requested_at}, {timeout_s}"
    )


def guards_waiting_for_worker(now: datetime | None = None) -> int:
    """Guards recorded more than ``NO_WORKER_AFTER_S`` ago that no worker has started yet."""
    cutoff = (now or timezone.now()) - timedelta(seconds=NO_WORKER_AFTER_S)
    return ChangeGuard.objects.filter(status=ChangeGuard.Status.PENDING, requested_at__lt=cutoff).count()


def guard_waiting_for(
    guard: ChangeGuard, rows: Sequence[tuple[str, int | None, str | None]], now: datetime
) -> str | None:
    """What an unfinished guard is queued behind (a worker, or its site's request cap), or None: the guards
    requested before it still in the same queue, and first of all a task queue that is down."""
    if guard.status in ChangeGuard.UNFINISHED:
        outage = broker_outage_open()
        if outage is not None:
            return (
                f"{broker_outage_describe(outage, now)}: no poll round can be queued until it answers, "
                "then the guard carries on"
            )
    if guard.status == ChangeGuard.Status.PENDING:
        ahead = ChangeGuard.objects.filter(
            status=ChangeGuard.Status.PENDING, requested_at__lt=guard.requested_at
        ).count()
        text = f"queued for a worker to insert its checkpoints, behind {ahead} other guard(s)"
        waited = (now - guard.requested_at).total_seconds()
        if waited >= NO_WORKER_AFTER_S:
            text += f"; no worker has picked it up in {waited:.0f} s: {workers_seen(now).describe(now)}"
        return text
    if guard.status != ChangeGuard.Status.RUNNING:
        return None
    pending_sites = {
        (site_id, name)
        for status, site_id, name in rows
        if status == TaggedCheckpoint.Status.PENDING and site_id is not None
    }
    if not pending_sites:
        return None
    parts = []
    for site_id, name in sorted(pending_sites, key=lambda p: p[1] or ""):
        ahead = (
            ChangeGuard.objects.filter(
                vpgs__site_id=site_id,
                vpgs__status=TaggedCheckpoint.Status.PENDING,
                requested_at__lt=guard.requested_at,
            )
            .distinct()
            .count()
        )
        parts.append(f"behind {ahead} other guard(s) for {name or 'its site'}'s request cap")
    return "queued to insert its checkpoints, " + "; ".join(parts)


def guard_of_change(vm_identifier: str, change_id: str) -> ChangeGuard | None:
    """The guard recorded for this VM and change id, if any (a unique constraint): every guard creation asks first
    and nearly always finds none, so one plain query built once, cheaper than building it through the ORM."""
    with connection.cursor() as cursor:
        cursor.execute(_change_sql(), [vm_identifier, change_id])
        found = cursor.fetchone()
    return None if found is None else bulk.model_from_row(ChangeGuard, found)


@functools.cache
def _change_sql() -> str:
    vm, change = bulk.column(ChangeGuard, "vm_identifier"), bulk.column(ChangeGuard, "change_id")
    return f"SELECT {bulk.columns(ChangeGuard)} FROM {bulk.table(ChangeGuard)} WHERE {vm} = %s AND {change} = %s"


def site_listing_times_s(site_id: int | None, *, limit: int = 20) -> list[float]:
    """How long the site's ZVM took to list our recent checkpoints (insert start to listed), newest first: what the
    wait's pacing learns from; only listed rows count."""
    if site_id is None:
        return []
    # Every poll round and insert batch reads this: one plain query built once.
    with connection.cursor() as cursor:
        cursor.execute(_listing_times_sql(connection.vendor), [site_id, str(TaggedCheckpoint.Status.LISTED), limit])
        return [ms / 1000 for (ms,) in cursor.fetchall() if ms is not None]


@functools.cache
def _listing_times_sql(vendor: str) -> str:
    col = bulk.column_of(TaggedCheckpoint, "c")
    # ``listed_after_ms`` is the poller's estimate of the ZVM's own time; rows listed before it
    # was recorded have only ``waited_ms`` (when we saw it).
    return (
        f"SELECT COALESCE({col('listed_after_ms')}, {col('waited_ms')}) FROM {bulk.table(TaggedCheckpoint)} c "
        f"WHERE {col('site')} = %s AND {col('status')} = %s "
        f"AND {col('insert_started_at')} IS NOT NULL AND {col('waited_ms')} IS NOT NULL "
        f"ORDER BY {col('insert_started_at')} DESC LIMIT %s"
    )


def site_inserted_rows(site_id: int) -> list[TaggedCheckpoint]:
    """The site's rows inserted and not ended, each with its guard, oldest guard first: what a poll round with a
    row due reads. One plain statement built once (``select_related`` cost more to build than to run)."""
    return rows_with_guards(
        _inserted_rows_sql(connection.vendor), [site_id, *(str(s) for s in TaggedCheckpoint.INSERTED)]
    )


def rows_with_guards(sql: str, params: Sequence[int | str]) -> list[TaggedCheckpoint]:
    """The rows ``sql`` (made by ``rows_with_guards_sql``) reads, each with its guard."""
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        found = cursor.fetchall()
    split = bulk.column_count(TaggedCheckpoint)
    rows = []
    for values in found:
        row = bulk.model_from_row(TaggedCheckpoint, values[:split])
        row.guard = bulk.model_from_row(ChangeGuard, values[split:])
        rows.append(row)
    return rows


@functools.cache
def _inserted_rows_sql(vendor: str) -> str:
    row = bulk.column_of(TaggedCheckpoint, "c")
    return rows_with_guards_sql(f"{row('site')} = %s AND {row('status')} IN ({bulk.marks(TaggedCheckpoint.INSERTED)})")


def rows_with_guards_sql(where: str, tail: str = "") -> str:
    """``SELECT`` the rows (``c``) matching ``where`` joined with their guards (``g``), oldest guard first,
    as ``rows_with_guards`` reads them; ``tail`` follows the order (a ``LIMIT``)."""
    row, guard = bulk.column_of(TaggedCheckpoint, "c"), bulk.column_of(ChangeGuard, "g")
    return (
        f"SELECT {bulk.columns(TaggedCheckpoint, 'c')}, {bulk.columns(ChangeGuard, 'g')} "
        f"FROM {bulk.table(TaggedCheckpoint)} c INNER JOIN {bulk.table(ChangeGuard)} g ON {guard('id')} = {row('guard')} "
        f"WHERE {where} ORDER BY {guard('requested_at')}, {row('id')} {tail}"
    )


def site_waiting_vpgs(site_id: int) -> int:
    """How many distinct VPGs of the site have a tagged checkpoint inserted and not yet listed or ended."""
    waiting = (TaggedCheckpoint.Status.INSERTING, TaggedCheckpoint.Status.WAITING)
    return (
        TaggedCheckpoint.objects.filter(site_id=site_id, status__in=waiting).values("vpg_identifier").distinct().count()
    )


@dataclass(frozen=True)
class JournalState:
    """What the retention forecast knows of one checkpoint (both None: nothing)."""

    leaves_at: datetime | None = None  # estimated; in the past once it left
    left_seen_at: datetime | None = None  # a ZVM showed the journal past it


def _rows_of(vpg_identifier: Any, checkpoint_identifier: Any) -> QuerySet[TaggedCheckpoint]:
    # Rows of several guards may name one checkpoint (never in practice: each insert is new); the
    # freshest estimate wins.
    return TaggedCheckpoint.objects.filter(
        vpg_identifier=vpg_identifier, checkpoint_identifier=checkpoint_identifier, leaves_journal_at__isnull=False
    ).order_by("-journal_estimated_at")


def journal_state_for(*, vpg_identifier: str, checkpoint_identifier: str) -> JournalState:
    """The forecast of our tagged checkpoint of that VPG; empty when unknown or not one of ours."""
    if not checkpoint_identifier:
        return JournalState()
    found = _rows_of(vpg_identifier, checkpoint_identifier).values_list("leaves_journal_at", "left_journal_seen_at")
    first = found.first()
    return JournalState(*first) if first else JournalState()


def journal_estimate_for(*, vpg_identifier: str, checkpoint_identifier: str) -> datetime | None:
    """When our tagged checkpoint of that VPG leaves (or left) its journal, as last estimated."""
    return journal_state_for(vpg_identifier=vpg_identifier, checkpoint_identifier=checkpoint_identifier).leaves_at


def journal_state_annotations() -> dict[str, Subquery]:
    """For a queryset of rows with ``vpg_identifier`` and ``checkpoint_identifier`` (recoveries):
    ``journal_leaves_at`` and ``journal_left_seen_at`` in the same query (see ``journal_state_of``)."""
    rows = _rows_of(OuterRef("vpg_identifier"), OuterRef("checkpoint_identifier"))
    return {
        "journal_leaves_at": Subquery(rows.values("leaves_journal_at")[:1]),
        "journal_left_seen_at": Subquery(rows.values("left_journal_seen_at")[:1]),
    }


def journal_state_of(obj: Any) -> JournalState:
    """The forecast of a recovery's checkpoint: from ``journal_state_annotations`` when the
    queryset had them, else one query."""
    if hasattr(obj, "journal_leaves_at"):
        return JournalState(obj.journal_leaves_at, obj.journal_left_seen_at)
    return journal_state_for(vpg_identifier=obj.vpg_identifier, checkpoint_identifier=obj.checkpoint_identifier)


def guard_journal_annotations() -> dict[str, Min]:
    """For a queryset of guards: ``leaves_journal_at``, when the first of its checkpoints leaves its VPG's journal
    (the guard stops covering every VPG then), and ``left_journal_seen_at``, the first a ZVM showed gone."""
    return {
        "leaves_journal_at": Min("vpgs__leaves_journal_at"),
        "left_journal_seen_at": Min("vpgs__left_journal_seen_at"),
    }


def guard_list(
    *, agent: str | None = None, vm: str | None = None, status: str | None = None, change_id: str | None = None
) -> QuerySet[ChangeGuard]:
    """Guards newest first with VPG counts; ``vm`` matches the VM's name or its identifier."""
    qs = ChangeGuard.objects.annotate(
        vpgs_total=Count("vpgs"),
        vpgs_listed=Count("vpgs", filter=Q(vpgs__status=TaggedCheckpoint.Status.LISTED)),
        **guard_journal_annotations(),
    )
    if agent:
        qs = qs.filter(agent_name=agent)
    if vm:
        qs = qs.filter(Q(vm_name=vm) | Q(vm_identifier=vm))
    if status:
        qs = qs.filter(status=status)
    if change_id:
        qs = qs.filter(change_id=change_id)
    return qs.order_by("-requested_at", "-pk")


def guards_timed_out(guards: QuerySet[ChangeGuard], *, timed_out: bool) -> QuerySet[ChangeGuard]:
    """``guards`` narrowed to those with a VPG whose checkpoint was not listed in time
    (``timed_out=False``: those without): the admin's filter the dashboard's "timed out" links to."""
    has_one = Exists(TaggedCheckpoint.objects.filter(guard=OuterRef("pk"), status=TaggedCheckpoint.Status.TIMED_OUT))
    return guards.filter(has_one) if timed_out else guards.exclude(has_one)


def guard_get(pk: int) -> ChangeGuard:
    """One guard with its counts and tagged checkpoints. Read only: a stale guard is not
    queued again here (``services.guard_read_and_resume`` does that). Raises NotFoundError."""
    guard = (
        guard_list()
        .prefetch_related(
            Prefetch("vpgs", queryset=TaggedCheckpoint.objects.select_related("site").order_by("vpg_name"))
        )
        .filter(pk=pk)
        .first()
    )
    if guard is None:
        raise NotFoundError(f"there is no guard #{pk}")
    return guard


def guard_counts_by_status() -> dict[str, int]:
    rows = ChangeGuard.objects.order_by().values_list("status").annotate(n=Count("id"))
    return {status: n for status, n in rows}


@dataclass(frozen=True)
class GuardWaits:
    """Finished guards' waits, request to finish, as a cumulative histogram."""

    count: int
    sum_s: float
    at_most: list[int]  # per bound of ``guard_waits_by_status``: guards that waited no longer


def guard_waits_by_status(bounds: Sequence[float]) -> dict[str, GuardWaits]:
    """For each final status, how long its guards waited, over every finished guard, counted in the database at
    every call (one query): the same whichever process asks."""
    wait = ExpressionWrapper(F("finished_at") - F("requested_at"), output_field=DurationField())
    buckets = {f"le_{i}": Count("id", filter=Q(wait__lte=timedelta(seconds=b))) for i, b in enumerate(bounds)}
    rows: Iterable[dict[str, Any]] = cast(
        Any,
        ChangeGuard.objects.filter(finished_at__isnull=False)
        .annotate(wait=wait)
        .order_by()
        .values("status")
        .annotate(n=Count("id"), total=Sum("wait"), **buckets),
    )
    return {
        row["status"]: GuardWaits(
            count=row["n"],
            sum_s=row["total"].total_seconds() if row["total"] is not None else 0.0,
            at_most=[row[f"le_{i}"] for i in range(len(bounds))],
        )
        for row in rows
    }
