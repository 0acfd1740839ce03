"""The dashboard's sections, in the order shown: what waits for a person first.

To add one: write its selector (a function of ``now``, database reads only) in the module of
its kind, its template ``templates/admin/dashboard/<key>.html`` (it gets the selector's answer
as ``data``), and list it here with the permissions that may see it (any one of them).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.http import HttpRequest
from django.utils import timezone

from rewind.dashboard import activity, approvals, service_health


@dataclass(frozen=True)
class Section:
    key: str
    title: str
    build: Callable[[datetime], Any]
    permissions: tuple[str, ...]
    for_a_person: bool = False  # shown first, under "Waiting for a person"

    @property
    def template(self) -> str:
        return f"admin/dashboard/{self.key}.html"


RECOVERIES = ("recoveries.view_recoveryrequest", "recoveries.approve_recovery")
SESSIONS = ("recoveries.view_flrsession", "recoveries.end_flr_session")

HELD_CALLS = ("rewind.view_heldcall", "rewind.approve_heldcall")

SECTIONS: tuple[Section, ...] = (
    Section("held_calls", "Calls waiting for a person", approvals.held_calls_waiting, HELD_CALLS, True),
    Section("pending", "Recoveries waiting for approval", approvals.pending_recoveries, RECOVERIES, True),
    Section("foreign", "Other operators' FLR sessions", approvals.foreign_sessions, SESSIONS, True),
    Section(
        "held",
        "Upstream tools waiting for approval",
        approvals.held_tools_waiting,
        ("rewind.change_upstreamtool",),
        True,
    ),
    Section("sessions", "Live FLR sessions per site", activity.live_sessions_per_site, SESSIONS),
    Section("guards", "Guards in the last 24 hours", activity.guard_activity, ("rewind.view_changeguard",)),
    Section("failed", "Failed and timed-out guards", activity.failed_guards, ("rewind.view_changeguard",)),
    Section("sites", "Sites", service_health.site_health_list, ("rewind.view_site",)),
    Section("workers", "Workers", service_health.workers_status, ("rewind.view_workerheartbeat",)),
    Section("reaper", "The reaper", service_health.reaper_status, ("recoveries.view_reapersweep",)),
    Section("audit", "The audit chain", service_health.audit_status, ("rewind.view_auditevent",)),
    Section("upstreams", "The gateway's upstreams", service_health.upstreams_status, ("rewind.view_upstream",)),
)


@dataclass(frozen=True)
class Shown:
    section: Section
    data: Any


def dashboard_for(request: HttpRequest, now: datetime | None = None) -> list[Shown]:
    """The sections this person may see, each with its data, in order."""
    now = now or timezone.now()
    user = request.user
    return [
        Shown(section, section.build(now))
        for section in SECTIONS
        if any(user.has_perm(permission) for permission in section.permissions)
    ]
