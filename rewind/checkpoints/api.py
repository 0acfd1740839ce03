"""Guards and their tagged checkpoints over REST: read-only list and detail (/api/guards/)."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from rewind.checkpoints.models import ChangeGuard
from rewind.checkpoints.presenters import GuardDetailOut, GuardRecordOut
from rewind.checkpoints.selectors import guard_get, guard_list
from rewind.lib.rest.outputs import rest_body
from rewind.lib.rest.pagination import BoundedLimitOffsetPagination, paginated_response
from rewind.lib.rest.permissions import HasModelPermission

VIEW = {"GET": "rewind.view_changeguard"}


class GuardListApi(APIView):
    """Guards, newest first: one per guarded change, with how many of its VPGs list the checkpoint."""

    permission_classes = [HasModelPermission]
    required_permissions = VIEW
    pagination_class = BoundedLimitOffsetPagination

    class FilterSerializer(serializers.Serializer):
        agent = serializers.CharField(required=False, max_length=64)
        vm = serializers.CharField(required=False, max_length=255)
        status = serializers.ChoiceField(required=False, choices=ChangeGuard.Status.choices)
        change_id = serializers.CharField(required=False, max_length=100)

    @extend_schema(responses=GuardRecordOut)
    def get(self, request: Request) -> Response:
        filters = self.FilterSerializer(data=request.query_params)
        filters.is_valid(raise_exception=True)
        return paginated_response(
            queryset=guard_list(**filters.validated_data),
            present=GuardRecordOut.model_validate,
            request=request,
            view=self,
        )


class GuardDetailApi(APIView):
    """A guard with the tagged checkpoint of each of its VPGs."""

    permission_classes = [HasModelPermission]
    required_permissions = VIEW

    @extend_schema(responses=GuardDetailOut)
    def get(self, request: Request, pk: int) -> Response:
        return Response(rest_body(GuardDetailOut.model_validate(guard_get(pk))))
