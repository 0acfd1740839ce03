"""Calls held for a person over REST: list them with their state, read one, approve or deny it.

Only signed-in staff people reach these (``rewind.lib.rest.permissions``): an agent's token is no session,
and approving takes ``rewind.approve_heldcall`` besides. Approving names the digest of the arguments
the person read (``arguments_digest``), so what is approved is what was shown.
"""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from rewind.approvals.models import HeldCall
from rewind.approvals.presenters import HeldCallOut, held_call_out
from rewind.approvals.services import APPROVE_PERMISSION, held_call_approve, held_call_deny
from rewind.lib.errors import NotFoundError
from rewind.lib.rest.outputs import rest_body
from rewind.lib.rest.pagination import BoundedLimitOffsetPagination, paginated_response
from rewind.lib.rest.permissions import HasModelPermission, request_id_of


def _get(pk: int) -> HeldCall:
    held = HeldCall.objects.select_related("agent").filter(pk=pk).first()
    if held is None:
        raise NotFoundError(f"there is no held call #{pk}")
    return held


class HeldCallListApi(APIView):
    """Calls held for a person, newest first; ``?state=`` and ``?agent=`` filter."""

    permission_classes = [HasModelPermission]
    required_permissions = {"GET": "rewind.view_heldcall"}
    pagination_class = BoundedLimitOffsetPagination

    @extend_schema(responses=HeldCallOut)
    def get(self, request: Request) -> Response:
        rows = HeldCall.objects.select_related("agent").order_by("-created_at", "-pk")
        if state := request.query_params.get("state"):
            rows = rows.filter(state=state)
        if agent := request.query_params.get("agent"):
            rows = rows.filter(agent_name=agent)
        return paginated_response(queryset=rows, present=held_call_out, request=request, view=self)


class HeldCallDetailApi(APIView):
    permission_classes = [HasModelPermission]
    required_permissions = {"GET": "rewind.view_heldcall"}

    @extend_schema(responses=HeldCallOut)
    def get(self, request: Request, pk: int) -> Response:
        return Response(rest_body(held_call_out(_get(pk))))


class HeldCallApproveApi(APIView):
    """Approve exactly the call whose ``arguments_digest`` you read; once enough people approved, it is
    checked again and forwarded once (through the gateway). The agent's owner may not approve."""

    permission_classes = [HasModelPermission]
    required_permissions = {"POST": APPROVE_PERMISSION}

    class InputSerializer(serializers.Serializer):
        arguments_digest = serializers.CharField(max_length=64)

    @extend_schema(request=InputSerializer, responses=HeldCallOut)
    def post(self, request: Request, pk: int) -> Response:
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        done = held_call_approve(
            held_id=_get(pk).pk,
            user=request.user,
            seen_digest=data.validated_data["arguments_digest"],
            request_id=request_id_of(request),
        )
        return Response(rest_body(held_call_out(done)))


class HeldCallDenyApi(APIView):
    """Deny a call not decided yet: nothing is forwarded. The agent's owner may deny."""

    permission_classes = [HasModelPermission]
    required_permissions = {"POST": APPROVE_PERMISSION}

    class InputSerializer(serializers.Serializer):
        note = serializers.CharField(max_length=500, required=False, allow_blank=True, default="")

    @extend_schema(request=InputSerializer, responses=HeldCallOut)
    def post(self, request: Request, pk: int) -> Response:
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        done = held_call_deny(
            held_id=_get(pk).pk, user=request.user, note=data.validated_data["note"], request_id=request_id_of(request)
        )
        return Response(rest_body(held_call_out(done)))
