"""Guest file tools in the admin, shown with the gateway's upstreams: saved and deleted through
``recoveries.restore.guest_tools``, so every change is checked and audited with the person's name.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.http import HttpRequest

from recoveries.restore.guest_tools import guest_file_tools_check, guest_file_tools_remove, guest_file_tools_set
from recoveries.restore.models import GuestFileTools
from rewind.lib.admin_base import actor_for
from rewind.lib.errors import ApplicationError

_FIELDS = ["upstream", "os", *GuestFileTools.EDITABLE]


class GuestFileToolsForm(forms.ModelForm):
    class Meta:
        model = GuestFileTools
        fields = _FIELDS

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        upstream = data.get("upstream") or getattr(self.instance, "upstream", None)
        os = data.get("os") or self.instance.os
        if upstream is not None and os and not self.errors:
            fields = {k: v for k, v in data.items() if k not in ("upstream", "os")}
            try:
                guest_file_tools_check(upstream=upstream, os=os, **fields)
            except ApplicationError as exc:
                raise forms.ValidationError(exc.message) from None
        return data


@admin.register(GuestFileTools)
class GuestFileToolsAdmin(admin.ModelAdmin):
    """Restore in place needs a writer for the VM's platform; the reader gives the diff and the verification."""

    operator_group = "gateway"
    form = GuestFileToolsForm
    list_display = ["upstream", "os", "vm_pattern", "writer_tool", "reader_tool", "content_encoding", "enabled"]
    list_filter = ["os", "enabled", "upstream"]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        # Upstream, platform and VMs name the row: another choice is another row.
        return ["upstream", "os", "vm_pattern"] if obj is not None else []

    def save_model(self, request: HttpRequest, obj: GuestFileTools, form: Any, change: bool) -> None:
        data = form.cleaned_data
        fields = {k: data[k] for k in GuestFileTools.EDITABLE if k in data}
        if change:
            fields["vm_pattern"] = obj.vm_pattern
        try:
            saved = guest_file_tools_set(actor=actor_for(request), upstream=obj.upstream, os=obj.os, **fields)
        except ApplicationError as exc:
            self.message_user(request, exc.message, messages.ERROR)
            raise forms.ValidationError(exc.message) from None
        obj.pk = saved.pk

    def delete_model(self, request: HttpRequest, obj: GuestFileTools) -> None:
        guest_file_tools_remove(actor=actor_for(request), tools_id=obj.pk)

    def delete_queryset(self, request: HttpRequest, queryset: Any) -> None:
        for row in queryset:
            guest_file_tools_remove(actor=actor_for(request), tools_id=row.pk)
