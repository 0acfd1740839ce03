"""Catalog admin: entries edited only through the services (audited), sightings classified by actions."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse

from catalog.models import MutatingTool, ToolSighting
from catalog.selectors import mutating_tool_get
from catalog.services import (
    mutating_tool_add,
    mutating_tool_remove,
    mutating_tool_update,
    normalize_pattern,
    tool_sighting_classify_mutating,
    tool_sighting_classify_readonly,
    validate_entry_fields,
)
from rewind.audit import Actor
from rewind.lib.admin_base import ReadOnlyAdmin, show_saved
from rewind.lib.errors import ApplicationError
from rewind.policy.models import Decision


def _actor(request: HttpRequest) -> Actor:
    return Actor.user(request.user.get_username())


class MutatingToolForm(forms.ModelForm):
    class Meta:
        model = MutatingTool
        fields = ["pattern", "vm_arg", "platform", "description", "decision", "enabled"]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Left out (a form of an older page, a script): the default, checkpoint.
        self.fields["decision"].required = False

    def clean_decision(self) -> str:
        return self.cleaned_data.get("decision") or Decision.CHECKPOINT

    def clean_pattern(self) -> str:
        try:
            return normalize_pattern(self.cleaned_data["pattern"])
        except ApplicationError as exc:
            raise forms.ValidationError(exc.message) from None

    def clean(self) -> dict[str, Any]:
        # The service checks these too; checking here shows the problem on the form.
        data = super().clean() or {}
        if not self.errors:
            try:
                validate_entry_fields(
                    vm_arg=(data.get("vm_arg") or "").strip(),
                    platform=data.get("platform") or "",
                    description=data.get("description") or "",
                    decision=data.get("decision") or "",
                )
            except ApplicationError as exc:
                raise forms.ValidationError(exc.message) from None
        return data


@admin.register(MutatingTool)
class MutatingToolAdmin(admin.ModelAdmin):
    form = MutatingToolForm
    list_display = ["pattern", "vm_arg", "platform", "decision", "enabled", "added_by", "added_by_kind", "updated_at"]
    list_filter = ["enabled", "decision", "platform", "added_by_kind"]
    search_fields = ["pattern", "description", "vm_arg"]
    actions = ["disable_entries", "enable_entries"]

    def get_readonly_fields(self, request: HttpRequest, obj: MutatingTool | None = None) -> list[str]:
        info = ["added_by", "added_by_kind", "created_at", "updated_at"]
        # The pattern is the entry's identity; to guard something else, add another entry.
        return ["pattern", *info] if obj is not None else info

    def save_model(self, request: HttpRequest, obj: MutatingTool, form: Any, change: bool) -> None:
        data = form.cleaned_data
        fields = {k: data[k] for k in ("vm_arg", "platform", "description", "decision", "enabled") if k in data}
        try:
            if change:
                saved = mutating_tool_update(actor=_actor(request), tool=mutating_tool_get(obj.pk), **fields)
            else:
                saved = mutating_tool_add(
                    actor=_actor(request),
                    pattern=data["pattern"],
                    vm_arg=fields["vm_arg"],
                    platform=fields["platform"],
                    description=fields["description"],
                    decision=fields["decision"],
                )
                if not fields.get("enabled", True):
                    saved = mutating_tool_update(actor=_actor(request), tool=saved, enabled=False)
        except ApplicationError as exc:
            self.message_user(request, exc.message, messages.ERROR)
            return
        show_saved(obj, mutating_tool_get(saved.pk))

    def delete_model(self, request: HttpRequest, obj: MutatingTool) -> None:
        mutating_tool_remove(actor=_actor(request), tool=obj)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[MutatingTool]) -> None:
        for tool in queryset:
            mutating_tool_remove(actor=_actor(request), tool=tool)

    @admin.action(description="Disable selected entries (they stop guarding)")
    def disable_entries(self, request: HttpRequest, queryset: QuerySet[MutatingTool]) -> None:
        for tool in queryset:
            mutating_tool_update(actor=_actor(request), tool=tool, enabled=False)
        self.message_user(request, f"Disabled {queryset.count()} entries.", messages.SUCCESS)

    @admin.action(description="Enable selected entries")
    def enable_entries(self, request: HttpRequest, queryset: QuerySet[MutatingTool]) -> None:
        for tool in queryset:
            mutating_tool_update(actor=_actor(request), tool=tool, enabled=True)
        self.message_user(request, f"Enabled {queryset.count()} entries.", messages.SUCCESS)


class ClassifyMutatingForm(forms.Form):
    vm_arg = forms.ChoiceField(label="Argument naming the VM", required=False)
    other_vm_arg = forms.CharField(label="…or another argument name", required=False, max_length=100)
    platform = forms.ChoiceField(choices=MutatingTool.Platform.choices, initial=MutatingTool.Platform.ANY)
    description = forms.CharField(max_length=500, widget=forms.TextInput(attrs={"size": 80}))

    def __init__(self, *args: Any, sighting: ToolSighting, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.sighting = sighting
        names = [str(n) for n in sighting.argument_names]
        vm_arg = self.fields["vm_arg"]
        assert isinstance(vm_arg, forms.ChoiceField)
        vm_arg.choices = [("", "—")] + [(n, n) for n in names]
        # Known before any call when the gateway listed the tool, or learned from a call that named a protected VM.
        if sighting.suggested_vm_arg in names:
            vm_arg.initial = sighting.suggested_vm_arg
        self.fields["description"].initial = f"Changes a guest ({sighting.tool})"

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        chosen = (data.get("other_vm_arg") or "").strip() or data.get("vm_arg") or ""
        if not chosen:
            raise forms.ValidationError("choose the argument that names the VM")
        data["chosen_vm_arg"] = chosen
        return data


@admin.register(ToolSighting)
class ToolSightingAdmin(ReadOnlyAdmin):
    list_display = [
        "tool",
        "status",
        "count",
        "first_seen_at",
        "last_seen_at",
        "agent_list",
        "argument_list",
        "suggested_vm_arg",
        "read_only_hint",
    ]
    list_filter = ["status"]
    search_fields = ["tool"]
    readonly_fields = [
        "tool",
        "count",
        "first_seen_at",
        "last_seen_at",
        "agents",
        "argument_names",
        "suggested_vm_arg",
        "annotations",
        "status",
        "classified_by",
        "classified_at",
    ]
    actions = ["classify_mutating", "classify_readonly"]

    @admin.display(description="agents")
    def agent_list(self, obj: ToolSighting) -> str:
        return ", ".join(str(a) for a in obj.agents)

    @admin.display(description="annotated read-only", boolean=True)
    def read_only_hint(self, obj: ToolSighting) -> bool | None:
        return None if obj.annotations is None else bool(obj.annotations.get("readOnlyHint"))

    @admin.display(description="arguments seen")
    def argument_list(self, obj: ToolSighting) -> str:
        return ", ".join(str(a) for a in obj.argument_names)

    def has_classify_permission(self, request: HttpRequest) -> bool:
        # Classifying a sighting as mutating adds a catalog entry.
        return bool(request.user.has_perm("catalog.add_mutatingtool"))

    @admin.action(description="Mutating → add to the catalog…", permissions=["classify"])
    def classify_mutating(self, request: HttpRequest, queryset: QuerySet[ToolSighting]) -> HttpResponse | None:
        sightings = list(queryset.exclude(status=ToolSighting.Status.ADDED))
        forms_by = [
            (s, ClassifyMutatingForm(request.POST if "apply" in request.POST else None, sighting=s, prefix=f"s{s.pk}"))
            for s in sightings
        ]
        if "apply" in request.POST and all(f.is_valid() for _, f in forms_by):
            added = 0
            for sighting, form in forms_by:
                try:
                    tool_sighting_classify_mutating(
                        actor=_actor(request),
                        sighting=sighting,
                        vm_arg=form.cleaned_data["chosen_vm_arg"],
                        platform=form.cleaned_data["platform"],
                        description=form.cleaned_data["description"],
                    )
                    added += 1
                except ApplicationError as exc:
                    self.message_user(request, f"{sighting.tool}: {exc.message}", messages.ERROR)
            if added:
                self.message_user(request, f"Added {added} tools to the catalog.", messages.SUCCESS)
            return None
        if not forms_by:
            self.message_user(request, "Those tools are already in the catalog.", messages.WARNING)
            return None
        context = {
            **self.admin_site.each_context(request),
            "title": "Add tools to the mutating-tool catalog",
            "opts": self.model._meta,
            "forms": forms_by,
            "action": "classify_mutating",
            "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
        }
        return TemplateResponse(request, "admin/catalog/toolsighting/classify_mutating.html", context)

    @admin.action(description="Read-only → ignore", permissions=["classify"])
    def classify_readonly(self, request: HttpRequest, queryset: QuerySet[ToolSighting]) -> None:
        sightings = list(queryset.exclude(status=ToolSighting.Status.ADDED))
        for sighting in sightings:
            tool_sighting_classify_readonly(actor=_actor(request), sighting=sighting)
        self.message_user(request, f"Marked {len(sightings)} tools read-only.", messages.SUCCESS)
