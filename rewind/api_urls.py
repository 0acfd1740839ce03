"""REST API routes; each app adds its own module here."""

from __future__ import annotations

from django.urls import URLPattern, URLResolver, include, path

urlpatterns: list[URLPattern | URLResolver] = [
    path("recoveries/", include("recoveries.urls")),
    path("catalog/", include("catalog.urls")),
    # The rewind parts' routes share one URL namespace, rewind-api (e.g. rewind-api:site-list).
    path(
        "",
        include(
            (
                [
                    path("", include("rewind.audit.urls")),
                    path("", include("rewind.sites.urls")),
                    path("", include("rewind.agents.urls")),
                    path("", include("rewind.gateway.urls")),
                    path("", include("rewind.checkpoints.urls")),
                    path("", include("rewind.approvals.urls")),
                    path("", include("rewind.policy.urls")),
                ],
                "rewind-api",
            )
        ),
    ),
]
