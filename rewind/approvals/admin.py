"""The approver's console for calls held for a person: the list with their state, a page that shows the
call exactly as it will be sent, and approve or deny behind a confirmation. Every decision goes
through a service, so it is audited with the person's name; the rows themselves are read-only."""

from __future__ import annotations

import json
from typing import Any

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.html import format_html

from rewind.approvals.models import HeldCall, HeldCallApproval
from rewind.approvals.services import APPROVE_PERMISSION, held_call_approve, held_call_deny, owner_refusal
from rewind.lib.admin_base import ReadOnlyAdmin, status_badge
from rewind.lib.errors import ApplicationError

VIEW_PERMISSION = "rewind.view_heldcall"


class ApprovalInline(admin.TabularInline):
    model = HeldCallApproval
    fields = readonly_fields = ("approver_name", "created_at")
    extra = 0
    can_delete = False

    def has_add_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False


def _may_see(request: HttpRequest) -> bool:
    return any(request.user.has_perm(p) for p in (APPROVE_PERMISSION, VIEW_PERMISSION))


@admin.register(HeldCall)
class HeldCallAdmin(ReadOnlyAdmin):
    list_display = ["id", "state_badge", "review", "tool", "vm", "agent_name", "created_at", "expires_at", "waited"]
    list_display_links = ["id"]
    list_filter = ["state", "mode"]
    search_fields = ["tool", "vm", "agent_name", "call_id", "arguments_digest", "request_id"]
    exclude = ["arguments_encrypted", "result_encrypted"]
    inlines = [ApprovalInline]

    def has_view_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return _may_see(request) or super().has_view_permission(request, obj)

    def has_module_permission(self, request: HttpRequest) -> bool:
        return _may_see(request) or super().has_module_permission(request)

    @admin.display(description="State", ordering="state")
    def state_badge(self, obj: HeldCall) -> str:
        return status_badge(obj.state)

    @admin.display(description="Review")
    def review(self, obj: HeldCall) -> str:
        url = reverse("admin:rewind_heldcall_review", args=[obj.pk])
        return format_html('<a href="{}">{}</a>', url, "Review and decide" if obj.state == "pending" else "View")

    @admin.display(description="waiting")
    def waited(self, obj: HeldCall) -> str:
        end = obj.decided_at or obj.finished_at or timezone.now()
        return f"{int((end - obj.created_at).total_seconds())} s"

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> HttpResponse:
        # Approvers come for the queue: open on the pending calls unless a filter was chosen.
        if not request.GET and request.method == "GET":
            return HttpResponseRedirect(f"{request.path}?state__exact={HeldCall.State.PENDING}")
        return super().changelist_view(request, extra_context)

    def get_queryset(self, request: HttpRequest) -> QuerySet[HeldCall]:
        return super().get_queryset(request).select_related("agent")

    def get_urls(self) -> list[URLPattern]:
        own = [
            path("<int:pk>/review/", self.admin_site.admin_view(self.review_view), name="rewind_heldcall_review"),
            path(
                "<int:pk>/decide/<str:decision>/",
                self.admin_site.admin_view(self.decide_view),
                name="rewind_heldcall_decide",
            ),
        ]
        return own + super().get_urls()

    def _held(self, request: HttpRequest, pk: int, *, to_decide: bool) -> HeldCall:
        if not (request.user.has_perm(APPROVE_PERMISSION) or (not to_decide and _may_see(request))):
            raise PermissionDenied
        held = HeldCall.objects.select_related("agent", "agent__owner", "guard").filter(pk=pk).first()
        if held is None:
            raise Http404(f"there is no held call #{pk}")
        return held

    def review_view(self, request: HttpRequest, pk: int) -> HttpResponse:
        held = self._held(request, pk, to_decide=False)
        refusal = owner_refusal(held, request.user) if request.user.is_authenticated else None
        context = {
            **self.admin_site.each_context(request),
            "title": f"Held call #{held.pk}: {held.tool}" + (f" on {held.vm}" if held.vm else ""),
            "opts": self.model._meta,
            "held": held,
            "arguments": json.dumps(held.arguments_shown, indent=2, ensure_ascii=False, sort_keys=True),
            "masked": "***" in json.dumps(held.arguments_shown),
            "approvals": list(held.approvals.all()),
            "own_agent": refusal,
            "already_approved": held.approvals.filter(approver_id=request.user.pk).exists(),
            "may_decide": request.user.has_perm(APPROVE_PERMISSION),
            "can_decide": held.state == HeldCall.State.PENDING and held.expires_at > timezone.now(),
        }
        return TemplateResponse(request, "admin/rewind/heldcall/review.html", context)

    def decide_view(self, request: HttpRequest, pk: int, decision: str) -> HttpResponse:
        if decision not in ("approve", "deny"):
            raise Http404("unknown decision")
        held = self._held(request, pk, to_decide=True)
        review = reverse("admin:rewind_heldcall_review", args=[pk])
        if request.method == "POST":
            rid = getattr(request, "id", None)
            try:
                if decision == "approve":
                    done = held_call_approve(
                        held_id=pk, user=request.user, seen_digest=request.POST.get("digest", ""), request_id=rid
                    )
                    text = (
                        "Approved: exactly this call is checked again and forwarded once."
                        if done.state == HeldCall.State.APPROVED and done.mode == HeldCall.Mode.GATEWAY
                        else "Approved: the agent may now make exactly this call."
                        if done.state == HeldCall.State.APPROVED
                        else f"Your approval is recorded; {done.approvals_required} distinct approvers are needed."
                    )
                else:
                    held_call_deny(held_id=pk, user=request.user, note=request.POST.get("note", ""), request_id=rid)
                    text = "Denied: nothing is forwarded."
                self.message_user(request, text, messages.SUCCESS)
            except ApplicationError as exc:
                self.message_user(request, exc.message, messages.ERROR)
            return HttpResponseRedirect(review)
        context = {
            **self.admin_site.each_context(request),
            "title": f"{decision.capitalize()} held call #{held.pk}?",
            "opts": self.model._meta,
            "held": held,
            "arguments": json.dumps(held.arguments_shown, indent=2, ensure_ascii=False, sort_keys=True),
            "decision": decision,
            "review_url": review,
        }
        return TemplateResponse(request, "admin/rewind/heldcall/confirm.html", context)
