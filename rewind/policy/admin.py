"""The policy in the admin: the stop switches (engage, lift), the VM rules, and the policy's version.

Every change goes through ``rewind.policy.services``, so it is audited with the person's name and
raises the version where it changes a decision. Only people reach these pages; no MCP tool can.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from rewind.audit import Actor
from rewind.lib.admin_base import ReadOnlyAdmin, show_saved, status_badge
from rewind.lib.errors import ApplicationError
from rewind.policy.models import ApprovalRule, PolicyVersion, StopSwitch
from rewind.policy.services import (
    approval_rule_add,
    approval_rule_remove,
    approval_rule_update,
    stop_engage,
    stop_lift,
)


def _actor(request: HttpRequest) -> Actor:
    return Actor.user(request.user.get_username())


class StopSwitchForm(forms.ModelForm):
    class Meta:
        model = StopSwitch
        fields = ["scope", "agent", "vm", "reason"]
        help_texts = {
            "agent": "Only for a stop of one agent.",
            "vm": "Only for a stop of one VM.",
            "reason": "Every refused agent is told who stopped it and why.",
        }


@admin.register(StopSwitch)
class StopSwitchAdmin(admin.ModelAdmin):
    """Engage a stop with "Add stop switch"; lift it with the action. A stop is never edited or deleted."""

    form = StopSwitchForm
    list_display = ["id", "in_force", "what", "reason", "stopped_by", "stopped_at", "lifted_by", "lifted_at"]
    list_filter = ["scope"]
    actions = ["lift_stops"]

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return obj is None and super().has_change_permission(request, obj)  # the list, for the action

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    @admin.display(description="in force")
    def in_force(self, obj: StopSwitch) -> str:
        return status_badge("stopped" if obj.active else "lifted")

    @admin.display(description="stops changes")
    def what(self, obj: StopSwitch) -> str:
        return obj.what

    def save_model(self, request: HttpRequest, obj: StopSwitch, form: Any, change: bool) -> None:
        data = form.cleaned_data
        try:
            saved = stop_engage(
                actor=_actor(request),
                scope=data["scope"],
                agent_id=data["agent"].pk if data.get("agent") else None,
                vm=data.get("vm") or "",
                reason=data.get("reason") or "",
                request_id=getattr(request, "id", None),
            )
        except ApplicationError as exc:
            self.message_user(request, exc.message, messages.ERROR)
            return
        show_saved(obj, saved)

    @admin.action(description="Lift the selected stops", permissions=["change"])
    def lift_stops(self, request: HttpRequest, queryset: QuerySet[StopSwitch]) -> None:
        for stop in queryset.filter(lifted_at__isnull=True):
            stop_lift(actor=_actor(request), stop=stop, request_id=getattr(request, "id", None))
            self.message_user(request, f"Lifted the stop {stop.what}.", messages.SUCCESS)


@admin.register(ApprovalRule)
class ApprovalRuleAdmin(admin.ModelAdmin):
    """VM rules: a guarded change of a VM they match waits, after its checkpoint, for a person."""

    list_display = ["kind", "value", "note", "enabled", "created_by", "created_at"]
    list_filter = ["kind", "enabled"]
    fields = ["kind", "value", "note", "enabled"]

    def get_readonly_fields(self, request: HttpRequest, obj: ApprovalRule | None = None) -> list[str]:
        return ["kind"] if obj is not None else []

    def save_model(self, request: HttpRequest, obj: ApprovalRule, form: Any, change: bool) -> None:
        data = form.cleaned_data
        try:
            if change:
                fields = {k: data[k] for k in ("value", "note", "enabled")}
                saved = approval_rule_update(actor=_actor(request), rule=ApprovalRule.objects.get(pk=obj.pk), **fields)
            else:
                saved = approval_rule_add(
                    actor=_actor(request), kind=data["kind"], value=data["value"], note=data["note"]
                )
                if not data["enabled"]:
                    saved = approval_rule_update(actor=_actor(request), rule=saved, enabled=False)
        except ApplicationError as exc:
            self.message_user(request, exc.message, messages.ERROR)
            return
        show_saved(obj, saved)

    def delete_model(self, request: HttpRequest, obj: ApprovalRule) -> None:
        approval_rule_remove(actor=_actor(request), rule=obj)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[ApprovalRule]) -> None:
        for rule in queryset:
            approval_rule_remove(actor=_actor(request), rule=rule)


@admin.register(PolicyVersion)
class PolicyVersionAdmin(ReadOnlyAdmin):
    """The policy's version: raised by every change of a decision; its changes are in the audit log."""

    list_display = ["n", "changed_at", "changed_by", "what"]
