"""Pagination helpers for APIView-based lists."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.db.models import QuerySet
from pydantic import BaseModel
from rest_framework.pagination import BasePagination, CursorPagination, LimitOffsetPagination
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.serializers import Serializer

from rewind.lib.rest.outputs import rest_body


class AuditCursorPagination(CursorPagination):
    """Newest recording first (``id``: set at insert, unlike the chain position, which an event gets
    just after its commit); a cursor stays stable while events are appended and chained, and needs
    no COUNT(*) over a table that only grows."""

    ordering = "-id"
    page_size = 100
    page_size_query_param = "limit"
    max_page_size = 1000


class BoundedLimitOffsetPagination(LimitOffsetPagination):
    max_limit = 1000


def paginated_response(
    *,
    queryset: QuerySet[Any],
    present: Callable[[Any], BaseModel] | None = None,
    serializer_class: type[Serializer] | None = None,  # the sites' API, until it has output models
    request: Request,
    view: Any,
) -> Response:
    """One page of ``queryset``, each row as ``present`` makes it its output model, paginated as the
    view's ``pagination_class`` says (the API's schema reads the same attribute), else by limit and offset."""
    pagination_class: type[BasePagination] = getattr(view, "pagination_class", None) or BoundedLimitOffsetPagination
    paginator = pagination_class()
    page = paginator.paginate_queryset(queryset, request, view=view)
    if present is None:
        assert serializer_class is not None
        return paginator.get_paginated_response(serializer_class(page, many=True).data)
    return paginator.get_paginated_response([rest_body(present(row)) for row in page or ()])
