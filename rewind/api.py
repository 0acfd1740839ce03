"""The REST API's single exception handler: every error is ``{"detail": ..., ...}``, a route no URL matches too."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views import defaults
from rest_framework import status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from rewind.lib.errors import ApplicationError, NotFoundError, PermissionDeniedError
from rewind.zvm import ZvmError


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    if isinstance(exc, NotFoundError):
        return Response({"detail": exc.message, **exc.extra}, status=status.HTTP_404_NOT_FOUND)
    if isinstance(exc, PermissionDeniedError):
        return Response({"detail": exc.message, **exc.extra}, status=status.HTTP_403_FORBIDDEN)
    if isinstance(exc, ApplicationError):
        return Response({"detail": exc.message, **exc.extra}, status=status.HTTP_409_CONFLICT)
    if isinstance(exc, ZvmError):
        return Response({"detail": str(exc)}, status=status.HTTP_502_BAD_GATEWAY)
    return drf_exception_handler(exc, context)


def page_not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    """Django's 404 for pages; the API's JSON shape under /api/ (an id no route matches, e.g. -1)."""
    if request.path.startswith("/api/"):
        return JsonResponse({"detail": "Not found: no API route or record at this address."}, status=404)
    return defaults.page_not_found(request, exception)
