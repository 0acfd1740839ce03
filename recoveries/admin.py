"""The approver's console: pending requests, a review page, approve/deny behind a confirmation,
a page where a person asks for a file back (``recoveries.ask_admin``), and every live FLR session
on every site with "end session" behind a confirmation.

Rows are read-only here; every decision goes through a service, so it is audited with
the person's name.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html

from recoveries.ask_admin import AskPage
from recoveries.flr_sessions import flr_sessions_everywhere, session_end_by_hand
from recoveries.models import (
    FlrSession,
    ReaperSweep,
    RecoveryApproval,
    RecoveryRequest,
    RecoveryWriteBackConfirmation,
    RestoreState,
)
from recoveries.presenters import folder_summary, result_dict, waiting_message
from recoveries.restore import admin as restore_admin  # noqa: F401  (registers the guest file tools)
from recoveries.restore.services import recovery_restore_confirm, recovery_restore_decline, restore_context
from recoveries.selectors import (
    flr_session_recorded,
    recovery_approved_by,
    recovery_for_review,
    recovery_site,
    recovery_write_back_confirmed_by,
    site_enabled_get,
    undone_call,
)
from recoveries.services import (
    APPROVE_PERMISSION,
    ASK_PERMISSION,
    recovery_request_approve,
    recovery_request_deny,
)
from recoveries.site_wait import recovery_site_unavailable
from rewind.audit import Actor
from rewind.checkpoints.badges import retention_badge
from rewind.checkpoints.selectors import journal_state_annotations, journal_state_of
from rewind.lib.admin_base import ReadOnlyAdmin, status_badge, status_column
from rewind.lib.errors import ApplicationError
from rewind.zvm import ZvmError

END_PERMISSION = "recoveries.end_flr_session"


class ApprovalInline(admin.TabularInline):
    model = RecoveryApproval
    fields = readonly_fields = ("approver_name", "created_at")
    extra = 0
    can_delete = False

    def has_add_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False


class RequesterFilter(admin.SimpleListFilter):
    """Who asked: each agent, and each person, by name."""

    title = "asked by"
    parameter_name = "asked_by"

    def lookups(self, request: HttpRequest, model_admin: admin.ModelAdmin) -> list[tuple[str, str]]:
        rows = RecoveryRequest.objects.order_by().values_list("agent_name", "requested_by_name").distinct()
        found = {f"person:{person}" if person else f"agent:{agent}" for agent, person in rows}
        return [(value, value.replace(":", " ", 1)) for value in sorted(found)]

    def queryset(self, request: HttpRequest, queryset: QuerySet[RecoveryRequest]) -> QuerySet[RecoveryRequest]:
        kind, _, name = (self.value() or "").partition(":")
        if kind == "person":
            return queryset.filter(requested_by_name=name)
        if kind == "agent":
            return queryset.filter(agent_name=name, requested_by_name="")
        return queryset


class WriteBackConfirmationInline(admin.TabularInline):
    model = RecoveryWriteBackConfirmation
    fields = readonly_fields = ("person_name", "diff_token", "at")
    extra = 0
    can_delete = False
    verbose_name = "write-back confirmation"

    def has_add_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False


@admin.register(RecoveryRequest)
class RecoveryRequestAdmin(AskPage, ReadOnlyAdmin):
    list_display = [
        "id",
        "state",
        "review",
        "vm_name",
        "path",
        "asked_by",
        "vpg_name",
        "created_at",
        "expires_at",
        "leaves_journal",
    ]
    list_display_links = ["id"]
    list_filter = ["status", RequesterFilter]
    search_fields = ["vm_name", "vm_identifier", "path", "agent_name", "requested_by_name", "request_id"]
    inlines = [ApprovalInline, WriteBackConfirmationInline]
    # Its add view stays off (ReadOnlyAdmin): a person asks on the page of AskPage, linked from the list.
    change_list_template = "admin/recoveries/recoveryrequest/change_list.html"

    def has_view_permission(self, request: HttpRequest, obj: object = None) -> bool:
        # Whoever may approve must be able to see the queue; whoever may ask, the requests.
        return _may_see(request) or super().has_view_permission(request, obj)

    def has_module_permission(self, request: HttpRequest) -> bool:
        return _may_see(request) or super().has_module_permission(request)

    @admin.display(description="asked by", ordering="agent_name")
    def asked_by(self, obj: RecoveryRequest) -> str:
        return obj.requester

    @admin.display(description="Status", ordering="status")
    def state(self, obj: RecoveryRequest) -> str:
        """The status as a badge; for a run waiting for its recovery site, which one and since when."""
        if obj.status == RecoveryRequest.Status.WAITING:
            return format_html('{}<br><span class="rw-sub">{}</span>', status_badge(obj.status), waiting_message(obj))
        if obj.restore:
            said = obj.get_restore_state_display() or "not pulled yet"
            if obj.restore_state == RestoreState.AWAITING and obj.approvals_required > 1:
                said += f" ({obj.write_back_confirmations.count()} of {obj.approvals_required} confirmed)"
            return format_html('{}<br><span class="rw-sub">in place: {}</span>', status_badge(obj.status), said)
        return status_badge(obj.status)

    @admin.display(description="Review")
    def review(self, obj: RecoveryRequest) -> str:
        url = reverse("admin:recoveries_recoveryrequest_review", args=[obj.pk])
        label = "Review and decide" if obj.status == RecoveryRequest.Status.PENDING else "View"
        return format_html('<a href="{}">{}</a>', url, label)

    def get_queryset(self, request: HttpRequest) -> QuerySet[RecoveryRequest]:
        # The checkpoint's retention forecast, in the list's one query.
        return super().get_queryset(request).annotate(**journal_state_annotations())

    @admin.display(description="checkpoint leaves the journal")
    def leaves_journal(self, obj: RecoveryRequest) -> str:
        journal = journal_state_of(obj)
        return retention_badge(journal.leaves_at, journal.left_seen_at)

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> HttpResponse:
        # Approvers come here for the queue: open on the pending requests unless a filter was chosen.
        if not request.GET and request.method == "GET":
            return HttpResponseRedirect(f"{request.path}?status__exact={RecoveryRequest.Status.PENDING}")
        return super().changelist_view(request, {**(extra_context or {}), "can_ask": self.has_ask_permission(request)})

    def get_urls(self) -> list[URLPattern]:
        own = [
            path(
                "<int:pk>/review/",
                self.admin_site.admin_view(self.review_view),
                name="recoveries_recoveryrequest_review",
            ),
            path(
                "<int:pk>/decide/<str:decision>/",
                self.admin_site.admin_view(self.decide_view),
                name="recoveries_recoveryrequest_decide",
            ),
        ]
        return self.ask_urls() + own + super().get_urls()

    def _recovery(self, request: HttpRequest, pk: int, *, to_decide: bool = True) -> RecoveryRequest:
        if not (request.user.has_perm(APPROVE_PERMISSION) or (not to_decide and _may_see(request))):
            raise PermissionDenied
        recovery = recovery_for_review(recovery_id=pk)
        if recovery is None:
            raise Http404(f"there is no recovery #{pk}")
        return recovery

    def review_view(self, request: HttpRequest, pk: int) -> HttpResponse:
        # Whoever may ask may read the page of the request they asked for, though not approve it.
        recovery = self._recovery(request, pk, to_decide=False)
        own_agent = recovery.agent is not None and recovery.agent.owner_id == request.user.pk
        already = recovery_approved_by(recovery=recovery, user_id=request.user.pk)
        context = {
            **self.admin_site.each_context(request),
            "title": f"Recovery #{recovery.pk}: {recovery.vm_name} {recovery.path}",
            "opts": self.model._meta,
            "recovery": recovery,
            "result": result_dict(recovery, inline=False),
            "own_agent": own_agent,
            "own_request": recovery.requested_by_id is not None and recovery.requested_by_id == request.user.pk,
            "may_decide": request.user.has_perm(APPROVE_PERMISSION),
            "write_back_confirmed_by_you": recovery_write_back_confirmed_by(recovery=recovery, user_id=request.user.pk),
            "already_approved": already,
            "can_decide": recovery.status == RecoveryRequest.Status.PENDING and not recovery.is_expired_now,
            "site": recovery_site(recovery),
            "journal_badge": self.leaves_journal(recovery),
            "waiting": waiting_message(recovery) if recovery.status == RecoveryRequest.Status.WAITING else "",
            "site_unavailable": recovery_site_unavailable(recovery),
            "undone_call": undone_call(recovery),
            "folder": folder_summary(recovery) if recovery.recursive else "",
            **restore_context(recovery),
        }
        return TemplateResponse(request, "admin/recoveries/recoveryrequest/review.html", context)

    def decide_view(self, request: HttpRequest, pk: int, decision: str) -> HttpResponse:
        if decision not in ("approve", "deny", "write-back", "no-write-back"):
            raise Http404("unknown decision")
        recovery = self._recovery(request, pk)
        review = reverse("admin:recoveries_recoveryrequest_review", args=[pk])
        if decision in ("write-back", "no-write-back"):
            # The review page's second click: its form carries the diff it showed (no page of its own).
            if request.method == "POST":
                self._write_back(request, pk, write=decision == "write-back")
            return HttpResponseRedirect(review)
        if request.method == "POST":
            try:
                if decision == "approve":
                    done = recovery_request_approve(
                        recovery_id=pk, user=request.user, request_id=getattr(request, "id", None)
                    )
                    text = (
                        "Approved; the recovery is queued."
                        if done.status == RecoveryRequest.Status.APPROVED
                        else f"Your approval is recorded; {done.approvals_required} distinct approvers are needed."
                    )
                    if unavailable := recovery_site_unavailable(done):
                        text += f" Note: {unavailable}; the run waits for it until the request expires."
                else:
                    recovery_request_deny(
                        recovery_id=pk,
                        user=request.user,
                        note=request.POST.get("note", ""),
                        request_id=getattr(request, "id", None),
                    )
                    text = "Denied."
                self.message_user(request, text, messages.SUCCESS)
            except ApplicationError as exc:
                self.message_user(request, exc.message, messages.ERROR)
            return HttpResponseRedirect(review)
        context = {
            **self.admin_site.each_context(request),
            "title": f"{decision.capitalize()} recovery #{recovery.pk}?",
            "opts": self.model._meta,
            "recovery": recovery,
            "decision": decision,
            "review_url": review,
        }
        return TemplateResponse(request, "admin/recoveries/recoveryrequest/confirm.html", context)

    def _write_back(self, request: HttpRequest, pk: int, *, write: bool) -> None:
        if not write:
            try:
                recovery_restore_decline(recovery_id=pk, user=request.user, request_id=getattr(request, "id", None))
            except ApplicationError as exc:
                self.message_user(request, exc.message, messages.ERROR)
            else:
                self.message_user(request, "Not written back; the recovered bytes are kept.", messages.SUCCESS)
            return
        try:
            done = recovery_restore_confirm(
                recovery_id=pk,
                user=request.user,
                seen=request.POST.get("diff", ""),
                request_id=getattr(request, "id", None),
            )
        except ApplicationError as exc:
            self.message_user(request, exc.message, messages.ERROR)
            return
        if done.status == RecoveryRequest.Status.CONFIRM:
            count, required = done.write_back_confirmations.count(), done.approvals_required
            text = (
                f"Your confirmation is recorded: {count} of {required} confirmed the write-back; nothing is written "
                "until someone else confirms it too."
            )
        else:
            text = "Write-back confirmed: a checkpoint is taken, then the file is written and read back."
        self.message_user(request, text, messages.SUCCESS)


def _may_see(request: HttpRequest) -> bool:
    return any(request.user.has_perm(p) for p in (APPROVE_PERMISSION, ASK_PERMISSION))


class LiveFilter(admin.SimpleListFilter):
    """Sessions that may still hold a mount (the dashboard's "live" counts link here)."""

    title = "live"
    parameter_name = "live"

    def lookups(self, request: HttpRequest, model_admin: admin.ModelAdmin) -> list[tuple[str, str]]:
        return [("yes", "Live (may hold a mount)"), ("no", "Ended")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[FlrSession]) -> QuerySet[FlrSession]:
        if self.value() == "yes":
            return queryset.filter(status__in=FlrSession.LIVE)
        if self.value() == "no":
            return queryset.exclude(status__in=FlrSession.LIVE)
        return queryset


@admin.register(FlrSession)
class FlrSessionAdmin(ReadOnlyAdmin):
    list_display = [
        "id",
        "site",
        "session_id",
        status_column(),
        "recovery",
        "attempt",
        "created_at",
        "mounted_at",
        "ended_at",
        "end_reason",
    ]
    list_filter = [LiveFilter, "status", "site"]
    search_fields = ["session_id", "vm_identifier", "vpg_identifier"]
    list_select_related = ["site", "recovery"]
    change_list_template = "admin/recoveries/flrsession/change_list.html"

    def get_urls(self) -> list[URLPattern]:
        own = [
            path("live/", self.admin_site.admin_view(self.live_view), name="recoveries_flrsession_live"),
            path(
                "live/<int:site_pk>/<str:session_id>/end/",
                self.admin_site.admin_view(self.end_view),
                name="recoveries_flrsession_end",
            ),
        ]
        return own + super().get_urls()

    def live_view(self, request: HttpRequest) -> HttpResponse:
        if not (request.user.has_perm(END_PERMISSION) or request.user.has_perm("recoveries.view_flrsession")):
            raise PermissionDenied
        # ?site=<pk>: one site's sessions (the dashboard's per-site numbers link here).
        only = site_enabled_get(site_pk=int(request.GET["site"])) if request.GET.get("site", "").isdigit() else None
        listing = flr_sessions_everywhere(live_only=True, site_pk=only.pk if only else None)
        context = {
            **self.admin_site.each_context(request),
            "title": f"Live FLR sessions on {only.name}" if only else "Live FLR sessions on every site",
            "opts": self.model._meta,
            "listing": listing,
            "only": only,
            "can_end": request.user.has_perm(END_PERMISSION),
        }
        return TemplateResponse(request, "admin/recoveries/flrsession/live.html", context)

    def end_view(self, request: HttpRequest, site_pk: int, session_id: str) -> HttpResponse:
        if not request.user.has_perm(END_PERMISSION):
            raise PermissionDenied
        site = site_enabled_get(site_pk=site_pk)
        if site is None:
            raise Http404("no such site")
        live = reverse("admin:recoveries_flrsession_live")
        if request.method == "POST":
            try:
                report = session_end_by_hand(
                    site=site, session_id=session_id, actor=Actor.user(request.user.get_username())
                )
            except (ApplicationError, ZvmError) as exc:
                self.message_user(request, getattr(exc, "message", str(exc)), messages.ERROR)
            else:
                level = messages.SUCCESS if report.ok else messages.WARNING
                self.message_user(
                    request,
                    f"Session {session_id} on {site.name}: " + ("unmount sent" if report.ok else report.warning),
                    level,
                )
            return HttpResponseRedirect(live)
        ours = flr_session_recorded(site=site, session_id=session_id)
        context: dict[str, Any] = {
            **self.admin_site.each_context(request),
            "title": f"End FLR session {session_id}?",
            "opts": self.model._meta,
            "site": site,
            "session_id": session_id,
            "ours": ours,
            "live_url": live,
        }
        return TemplateResponse(request, "admin/recoveries/flrsession/confirm_end.html", context)


@admin.register(ReaperSweep)
class ReaperSweepAdmin(ReadOnlyAdmin):
    """Every sweep of the reaper in the last days: when, how long, and what it did."""

    list_display = ["started_at", "duration", "acted", "summary"]
    list_filter = ["acted"]
    date_hierarchy = "started_at"
    fields = readonly_fields = ("started_at", "finished_at", "acted", "report")

    @admin.display(description="took")
    def duration(self, obj: ReaperSweep) -> str:
        return f"{(obj.finished_at - obj.started_at).total_seconds():.1f} s"

    @admin.display(description="what it did")
    def summary(self, obj: ReaperSweep) -> str:
        done = [f"{k.replace('_', ' ')}: {v}" for k, v in sorted(obj.report.items()) if k != "site_errors" and v]
        errors = obj.report.get("site_errors") or {}
        if errors:
            done.append("could not sweep " + ", ".join(sorted(errors)))
        return "; ".join(done) or "nothing to do"
