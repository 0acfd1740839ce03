"""The audit log over REST: read-only list, detail and a chain check."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from rewind.audit.anchors import chain_check
from rewind.audit.models import AuditEvent
from rewind.audit.presenters import AuditEventOut, AuditVerificationOut, audit_verification_out
from rewind.audit.selectors import audit_event_get, audit_event_list
from rewind.lib.rest.outputs import rest_body
from rewind.lib.rest.pagination import AuditCursorPagination, paginated_response
from rewind.lib.rest.permissions import HasModelPermission

VIEW = {"GET": "rewind.view_auditevent"}


class AuditEventListApi(APIView):
    """Audit events, newest first; follow ``next`` for older ones (a cursor stays stable while events are added)."""

    permission_classes = [HasModelPermission]
    required_permissions = VIEW
    pagination_class = AuditCursorPagination

    class FilterSerializer(serializers.Serializer):
        request_id = serializers.CharField(required=False, max_length=64)
        action = serializers.CharField(required=False, max_length=100)
        actor = serializers.CharField(required=False, max_length=150)
        actor_type = serializers.ChoiceField(required=False, choices=AuditEvent.ActorType.choices)
        target_type = serializers.CharField(required=False, max_length=50)
        target_id = serializers.CharField(required=False, max_length=255)
        since = serializers.DateTimeField(required=False)
        until = serializers.DateTimeField(required=False)

    @extend_schema(responses=AuditEventOut)
    def get(self, request: Request) -> Response:
        filters = self.FilterSerializer(data=request.query_params)
        filters.is_valid(raise_exception=True)
        return paginated_response(
            queryset=audit_event_list(**filters.validated_data),
            present=AuditEventOut.model_validate,
            request=request,
            view=self,
        )


class AuditEventDetailApi(APIView):
    """One audit event by its position in the chain."""

    permission_classes = [HasModelPermission]
    required_permissions = VIEW

    @extend_schema(responses=AuditEventOut)
    def get(self, request: Request, seq: int) -> Response:
        return Response(rest_body(AuditEventOut.model_validate(audit_event_get(seq))))


class AuditVerifyApi(APIView):
    """Walks the whole chain and holds it against the newest anchor (``manage.py audit_verify`` does the same); reports the first break."""

    permission_classes = [HasModelPermission]
    required_permissions = VIEW

    @extend_schema(responses=AuditVerificationOut)
    def get(self, request: Request) -> Response:
        return Response(rest_body(audit_verification_out(chain_check())))
