"""The admin site of the operators' console: its index is the dashboard."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest
from django.template.response import TemplateResponse

from rewind.dashboard.grouping import operator_groups, visible
from rewind.dashboard.sections import dashboard_for
from rewind.policy.selectors import stops_in_force


class OperatorsAdminSite(admin.AdminSite):
    site_header = "zerto-rewind"
    site_title = "zerto-rewind"
    index_title = "Operations"

    def index(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> TemplateResponse:
        context = {"dashboard": dashboard_for(request), "stops": stops_in_force(), **(extra_context or {})}
        return super().index(request, context)

    def get_app_list(self, request: HttpRequest, app_label: str | None = None) -> list[dict[str, Any]]:
        app_list = super().get_app_list(request, app_label)
        if app_label is not None:  # one app's own page keeps Django's layout
            return visible(app_list)
        return operator_groups(app_list, self._registry)
