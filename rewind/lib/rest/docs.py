"""The API's OpenAPI schema (``/api/schema/``) and its docs page (``/api/docs/``).

Both need a signed-in user unless ``REWIND_API_DOCS_PUBLIC`` is set: the schema names every
route and field, which is no secret but no business of an anonymous caller either. The
docs page sends an anonymous browser to the admin's login and back; the schema answers 403
(``rewind.lib.rest.permissions.ApiDocsPermission``). The page's Swagger UI files come from
drf-spectacular-sidecar, so it works without internet, and nothing of it is inline (the content
security policy, ``SECURE_CSP``, allows no inline script or style).
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.auth.views import redirect_to_login
from django.http import HttpRequest, HttpResponseBase
from django.urls import reverse
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView

schema_view = SpectacularAPIView.as_view()
# The split view serves the page's script from a URL of its own (?script=) and our template moves its
# style to a file: the content security policy allows no inline script or style.
_swagger = SpectacularSwaggerSplitView.as_view(url_name="api-schema", template_name="rest/swagger_ui.html")


def docs_view(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
    if not settings.REWIND_API_DOCS_PUBLIC and not request.user.is_authenticated:
        return redirect_to_login(request.get_full_path(), reverse("admin:login"))
    return _swagger(request, *args, **kwargs)
