"""The admin site: each part registers its models in its own ``admin`` module, imported here."""

from __future__ import annotations

from django.contrib import admin

from rewind.agents import admin as agents_admin  # noqa: F401  (registers agents and tokens)
from rewind.approvals import admin as approvals_admin  # noqa: F401  (registers calls held for a person)
from rewind.audit import admin as audit_admin  # noqa: F401  (registers the audit log)
from rewind.checkpoints import admin as checkpoints_admin  # noqa: F401  (registers guards)
from rewind.gateway import admin as gateway_admin  # noqa: F401  (registers upstreams and gateway calls)
from rewind.notifications import admin as notifications_admin  # noqa: F401  (registers notification deliveries)
from rewind.oauth import admin as oauth_admin  # noqa: F401  (registers OAuth grants)
from rewind.policy import admin as policy_admin  # noqa: F401  (registers stop switches, VM rules, the version)
from rewind.sites import admin as sites_admin  # noqa: F401  (registers sites)
from rewind.workers import admin as workers_admin  # noqa: F401  (registers worker heartbeats)

admin.site.site_header = "zerto-rewind"
admin.site.site_title = "zerto-rewind"
admin.site.index_title = "Operations"
