"""Django's admin app, with the operators' console as its site (``INSTALLED_APPS`` names this)."""

from __future__ import annotations

from django.contrib.admin.apps import AdminConfig


class OperatorsAdminConfig(AdminConfig):
    default_site = "rewind.dashboard.site.OperatorsAdminSite"
