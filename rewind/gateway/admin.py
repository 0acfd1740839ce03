"""The gateway in the admin: upstreams (edited through the services, credentials write-only, a
"Test connection" action that lists the tools), each tool's exposed name, policy and pinned
definition (a new or changed one is approved on a page that shows what changed), and every
forwarded call with its call id."""

from __future__ import annotations

import json
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import F, QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html

from rewind.gateway.definitions import definition, definition_diff
from rewind.gateway.links import UpstreamUnavailable
from rewind.gateway.listing import upstream_tools_refresh
from rewind.gateway.models import GatewayCall, Policy, Upstream, UpstreamLink, UpstreamTool
from rewind.gateway.selectors import (
    upstream_exported_count,
    upstream_get,
    upstream_links_said,
    upstream_links_up,
    upstream_tool_get,
    upstream_tool_problem,
)
from rewind.gateway.services import (
    upstream_command_clean,
    upstream_create,
    upstream_tool_approve,
    upstream_tool_set_policy,
    upstream_update,
    upstream_url_clean,
)
from rewind.lib.admin_base import ReadOnlyAdmin, actor_for, status_badge
from rewind.lib.errors import ApplicationError, field_checked


def _json_object(text: str, what: str) -> dict[str, Any] | None:
    if not text.strip():
        return None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise forms.ValidationError(f"{what} must be a JSON object: {exc.msg} at character {exc.pos}") from None
    if not isinstance(value, dict):
        raise forms.ValidationError(f"{what} must be a JSON object of names to text values")
    return value


class UpstreamForm(forms.ModelForm):
    # Write-only, like site passwords: what is stored is never sent back to the browser.
    headers = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 3}),
        required=False,
        help_text='HTTP: the upstream\'s own credentials as JSON, e.g. {"Authorization": "Bearer ..."}. '
        "Stored encrypted; leave empty to keep the stored ones; {} removes them.",
    )
    env = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 3}),
        required=False,
        help_text="stdio: extra environment variables as JSON (the command gets no other variable of this "
        "service). Stored encrypted; leave empty to keep; {} removes them.",
    )
    command_json = forms.CharField(
        label="Command",
        required=False,
        help_text='stdio: the program and its arguments as a JSON list, e.g. ["npx", "-y", "ssh-mcp"]',
    )

    class Meta:
        model = Upstream
        fields = [
            "name",
            "transport",
            "url",
            "enabled",
            "host_vm",
            "connect_timeout_s",
            "call_timeout_s",
            "default_policy",
        ]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk:
            self.fields["name"].disabled = True  # exposed names and catalog entries are built from it
            self.fields["command_json"].initial = json.dumps(self.instance.command)

    def clean_headers(self) -> dict[str, Any] | None:
        return _json_object(self.cleaned_data["headers"], "headers")

    def clean_env(self) -> dict[str, Any] | None:
        return _json_object(self.cleaned_data["env"], "env")

    def clean_command_json(self) -> list[Any]:
        text = self.cleaned_data["command_json"].strip()
        if not text:
            return []
        try:
            value = json.loads(text)
        except json.JSONDecodeError:
            raise forms.ValidationError('give the command as a JSON list, e.g. ["npx", "ssh-mcp"]') from None
        if not isinstance(value, list):
            raise forms.ValidationError('give the command as a JSON list, e.g. ["npx", "ssh-mcp"]')
        return field_checked(upstream_command_clean, value, forms.ValidationError) if value else value

    def clean_url(self) -> str:
        value: str = self.cleaned_data["url"]
        return field_checked(upstream_url_clean, value, forms.ValidationError) if value.strip() else value


class UpstreamToolInline(admin.TabularInline):
    model = UpstreamTool
    extra = 0
    can_delete = False
    fields = ["name", "exposed_name", "catalog", "state", "problem", "policy", "read_only", "last_listed_at"]
    readonly_fields = ["name", "exposed_name", "catalog", "state", "problem", "policy", "read_only", "last_listed_at"]
    show_change_link = True

    def has_add_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    @admin.display(description="catalog name")
    def catalog(self, obj: UpstreamTool) -> str:
        return obj.catalog_name

    @admin.display(description="read-only", boolean=True)
    def read_only(self, obj: UpstreamTool) -> bool:
        return obj.read_only


@admin.register(Upstream)
class UpstreamAdmin(admin.ModelAdmin):
    form = UpstreamForm
    list_display = [
        "name",
        "transport",
        "endpoint",
        "enabled",
        "default_policy",
        "tool_count",
        "tools_listed_at",
        "last_error",
    ]
    list_filter = ["enabled", "transport", "default_policy"]
    search_fields = ["name", "url"]
    readonly_fields = ["tools_listed_at", "last_error"]
    inlines = [UpstreamToolInline]
    actions = ["test_connection"]

    @admin.display(description="endpoint")
    def endpoint(self, obj: Upstream) -> str:
        return obj.url if obj.transport == Upstream.Transport.HTTP else " ".join(obj.command)

    @admin.display(description="tools exported")
    def tool_count(self, obj: Upstream) -> int:
        return upstream_exported_count(obj)

    def save_model(self, request: HttpRequest, obj: Upstream, form: Any, change: bool) -> None:
        data = form.cleaned_data
        names = ("transport", "url", "enabled", "host_vm", "connect_timeout_s", "call_timeout_s", "default_policy")
        fields: dict[str, Any] = {k: data[k] for k in names}
        fields["command"] = data["command_json"]
        stored = upstream_get(obj.pk) if change else None
        try:
            if stored is not None:
                saved = upstream_update(
                    actor=actor_for(request),
                    upstream=stored,
                    headers=data["headers"],
                    env=data["env"],
                    **fields,
                )
            else:
                saved = upstream_create(
                    actor=actor_for(request), name=data["name"], headers=data["headers"], env=data["env"], **fields
                )
        except ApplicationError as exc:
            # The form checked shapes; the service checks the rest. Nothing was saved.
            self.message_user(request, exc.message, messages.ERROR)
            raise forms.ValidationError(exc.message) from None
        obj.pk = saved.pk

    @admin.action(description="Test connection (list its tools)")
    def test_connection(self, request: HttpRequest, queryset: QuerySet[Upstream]) -> None:
        for upstream in queryset:
            try:
                report = upstream_tools_refresh(upstream)
            except UpstreamUnavailable as exc:
                self.message_user(request, exc.message, messages.ERROR)
                continue
            names = ", ".join(report.exported) or "none"
            self.message_user(
                request,
                f"{upstream.name}: OK from here, {len(report.exported)} tools exported ({names})",
                messages.SUCCESS,
            )
            up = [row.process for row in upstream_links_up(upstream)]
            if up:
                self.message_user(request, f"{upstream.name}: answers {', '.join(up)} too", messages.SUCCESS)
            for said in upstream_links_said(upstream):
                self.message_user(request, f"{upstream.name}: but {said}", messages.WARNING)
            for name in report.collisions:
                problem = upstream_tool_problem(upstream=upstream, name=name)
                self.message_user(request, f"{upstream.name}/{name} refused: {problem}", messages.WARNING)
            if report.held:
                url = reverse("admin:rewind_upstreamtool_changelist") + f"?upstream__id__exact={upstream.pk}&held=yes"
                self.message_user(
                    request,
                    format_html(
                        '{}: {} tools are held until a person approves their definitions (<a href="{}">{}</a>); '
                        "agents do not see them until then",
                        upstream.name,
                        len(report.held),
                        url,
                        ", ".join(report.held),
                    ),
                    messages.WARNING,
                )
            if report.new_sightings:
                self.message_user(
                    request,
                    f"{upstream.name}: {len(report.new_sightings)} tools the catalog does not list were added to "
                    "Unlisted tools seen; classify them before agents call them",
                    messages.INFO,
                )


class UpstreamToolForm(forms.ModelForm):
    class Meta:
        model = UpstreamTool
        fields = ["policy"]


class HeldFilter(admin.SimpleListFilter):
    title = "definition"
    parameter_name = "held"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("yes", "held: new or changed"), ("no", "approved")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[UpstreamTool]) -> QuerySet[UpstreamTool]:
        if self.value() == "yes":
            return queryset.exclude(digest=F("approved_digest"))
        if self.value() == "no":
            return queryset.filter(digest=F("approved_digest"))
        return queryset


def _definition_state(tool: UpstreamTool) -> str:
    if not tool.held:
        return "approved"
    return "held: changed" if tool.approved_digest else "held: new"


@admin.register(UpstreamTool)
class UpstreamToolAdmin(admin.ModelAdmin):
    """The mapping agents see (exposed name) beside the catalog's name; the policy is edited here, and a held
    definition approved on its own page, which shows what changed."""

    form = UpstreamToolForm
    list_display = [
        "exposed_name",
        "catalog",
        "state_badge",
        "definition_link",
        "policy_shown",
        "read_only",
        "problem",
        "last_listed_at",
    ]
    list_filter = ["state", HeldFilter, "upstream", "policy"]
    search_fields = ["exposed_name", "name", "upstream__name"]
    readonly_fields = [
        "upstream",
        "name",
        "exposed_name",
        "state",
        "problem",
        "definition_link",
        "approved_by",
        "approved_at",
        "description",
        "input_schema",
        "annotations",
    ]
    actions = ["approve_definitions"]

    def has_add_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    def get_urls(self) -> list[URLPattern]:
        approve = path("approve/", self.admin_site.admin_view(self.approve_view), name="rewind_upstreamtool_approve")
        return [approve, *super().get_urls()]

    @admin.display(description="catalog name", ordering="name")
    def catalog(self, obj: UpstreamTool) -> str:
        return obj.catalog_name

    @admin.display(description="state", ordering="state")
    def state_badge(self, obj: UpstreamTool) -> str:
        return status_badge(obj.state)

    @admin.display(description="definition")
    def definition_link(self, obj: UpstreamTool) -> str:
        state = _definition_state(obj)
        if not obj.held:
            return state
        url = reverse("admin:rewind_upstreamtool_approve") + f"?ids={obj.pk}"
        return format_html('<a href="{}">{}: see what changed, approve</a>', url, state)

    @admin.display(description="policy")
    def policy_shown(self, obj: UpstreamTool) -> str:
        if obj.policy:
            return obj.policy
        return f"(default) {Policy.PASS if obj.read_only else obj.upstream.default_policy}"

    @admin.display(description="read-only", boolean=True)
    def read_only(self, obj: UpstreamTool) -> bool:
        return obj.read_only

    def save_model(self, request: HttpRequest, obj: UpstreamTool, form: Any, change: bool) -> None:
        upstream_tool_set_policy(
            actor=actor_for(request), tool=upstream_tool_get(obj.pk), policy=form.cleaned_data["policy"]
        )

    @admin.action(description="Approve the definitions as listed (shows what changed first)")
    def approve_definitions(self, request: HttpRequest, queryset: QuerySet[UpstreamTool]) -> HttpResponse:
        ids = ",".join(str(pk) for pk in queryset.values_list("pk", flat=True))
        return HttpResponseRedirect(reverse("admin:rewind_upstreamtool_approve") + f"?ids={ids}")

    def approve_view(self, request: HttpRequest) -> HttpResponse:
        """What changed in each tool's definition, and one button approving exactly what was shown."""
        if not self.has_change_permission(request):
            raise PermissionDenied
        ids = [int(pk) for pk in request.GET.get("ids", "").split(",") if pk.isdigit()]
        tools = list(
            UpstreamTool.objects.filter(pk__in=ids).select_related("upstream").order_by("upstream__name", "name")
        )
        held = [t for t in tools if t.held]
        changelist = reverse("admin:rewind_upstreamtool_changelist")
        if request.method == "POST":
            approved = []
            for tool in held:
                try:
                    upstream_tool_approve(
                        actor=actor_for(request), tool=tool, seen_digest=request.POST.get(f"digest-{tool.pk}", "")
                    )
                except ApplicationError as exc:
                    self.message_user(request, exc.message, messages.ERROR)
                else:
                    approved.append(tool.catalog_name)
            if approved:
                said = f"approved the definition of {', '.join(approved)}: agents see and call them now"
                self.message_user(request, said, messages.SUCCESS)
            return HttpResponseRedirect(changelist)
        shown = [
            {"tool": t, "state": _definition_state(t), "diff": definition_diff(t.approved_definition, definition(t))}
            for t in held
        ]
        context = {
            **self.admin_site.each_context(request),
            "title": "Approve these tool definitions?",
            "opts": self.model._meta,
            "shown": shown,
            "not_held": [t for t in tools if not t.held],
            "changelist_url": changelist,
        }
        return TemplateResponse(request, "admin/rewind/upstreamtool/approve.html", context)


@admin.register(GatewayCall)
class GatewayCallAdmin(ReadOnlyAdmin):
    list_display = [
        "call_id",
        "agent_name",
        "tool_name",
        "decision_badge",
        "outcome",
        "vm",
        "guard_link",
        "forwarded_at",
        "received_at",
    ]
    list_filter = ["decision", "outcome", "upstream_name"]
    search_fields = ["call_id", "agent_name", "tool", "vm", "change_id"]
    readonly_fields = [
        "call_id",
        "agent_name",
        "upstream_name",
        "tool",
        "exposed_name",
        "arguments",
        "decision",
        "reason",
        "catalog_entry",
        "policy",
        "vm",
        "vm_arg",
        "change_id",
        "guard_link",
        "outcome",
        "error",
        "received_at",
        "forwarded_at",
        "ended_at",
        "request_id",
    ]
    exclude = ["upstream", "guard", "agent_id"]

    @admin.display(description="tool", ordering="tool")
    def tool_name(self, obj: GatewayCall) -> str:
        return f"{obj.upstream_name}/{obj.tool}"

    @admin.display(description="decision", ordering="decision")
    def decision_badge(self, obj: GatewayCall) -> str:
        return status_badge(obj.decision or "deciding")

    @admin.display(description="guard")
    def guard_link(self, obj: GatewayCall) -> str:
        if obj.guard_id is None:
            return "-"
        url = reverse("admin:rewind_changeguard_change", args=[obj.guard_id])
        return format_html('<a href="{}">#{} ({})</a>', url, obj.guard_id, obj.change_id)


@admin.register(UpstreamLink)
class UpstreamLinkAdmin(ReadOnlyAdmin):
    """Each process's session to each upstream, as the process last found it (written when it changes)."""

    list_display = ["upstream", "process", "down_since", "error", "changed_at"]
    list_filter = ["upstream"]
