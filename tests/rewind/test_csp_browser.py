"""Every page of the admin and of ours runs in real Chromium under the content security policy.

The ``page`` fixture (tests/conftest.py) fails a test on any violation Chromium reports; here a
superuser opens every admin list, add and change page (with one record of each kind made through
the services where there is one), the dashboard, the review and live-session pages and the API's
docs page, and uses a few of their scripts (the action bar, a filter, the docs' operation list).
"""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib import admin
from django.urls import reverse

from tests.markers import NEEDS_CHROMIUM

pytestmark = [
    pytest.mark.timeout(300),
    NEEDS_CHROMIUM,
]


def _admin_pages() -> list[str]:
    pages = [reverse("admin:index"), reverse("admin:password_change")]
    for model, model_admin in admin.site._registry.items():
        info = (model._meta.app_label, model._meta.model_name)
        pages.append(reverse("admin:{}_{}_changelist".format(*info)))
        first = model._default_manager.order_by("pk").first()
        if first is not None:
            pages.append(reverse("admin:{}_{}_change".format(*info), args=[first.pk]))
        if model_admin.has_add_permission(_Superuser()):  # type: ignore[arg-type]
            pages.append(reverse("admin:{}_{}_add".format(*info)))
    return pages


class _Superuser:
    user = type("U", (), {"is_active": True, "is_staff": True, "is_superuser": True, "has_perm": lambda *a: True})()


def test_every_admin_page_and_ours_run_under_the_policy(
    live_server: Any, page: Any, superuser: Any, sites: Any
) -> None:
    page.goto(f"{live_server.url}/admin/login/")
    page.fill("#id_username", "root")
    page.fill("#id_password", "pw-root-123")
    page.click("input[type=submit]")
    page.wait_for_url("**/admin/")
    opened = 0
    for path in [*_admin_pages(), reverse("admin:recoveries_flrsession_live"), "/api/docs/"]:
        response = page.goto(f"{live_server.url}{path}")
        assert response is not None, path
        assert response.status < 400, (path, response.status)
        page.wait_for_load_state("load")
        opened += 1
    # The docs page's script ran (it is served from a URL of its own): Swagger UI lists the operations.
    page.wait_for_selector(".opblock", timeout=20_000)
    # The admin's own scripts: select all on a list, and its action bar counts them.
    page.goto(f"{live_server.url}{reverse('admin:rewind_site_changelist')}")
    page.check("#action-toggle")
    assert "selected" in page.inner_text(".action-counter")
    assert opened >= 40, opened
