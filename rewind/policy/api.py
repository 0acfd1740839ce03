"""The stop switches over REST: list them, engage one (everywhere, one agent, one VM), lift one; and the
policy's version. Only signed-in staff people reach these; no agent token is a session here."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from drf_spectacular.utils import extend_schema
from pydantic import RootModel
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from rewind.lib.errors import NotFoundError
from rewind.lib.rest.outputs import OutputModel, choices, rest_body
from rewind.lib.rest.permissions import HasModelPermission, actor_of, request_id_of
from rewind.policy.models import StopSwitch
from rewind.policy.selectors import policy_version_row, stop_get, stop_list
from rewind.policy.services import stop_engage, stop_lift


class StopOut(OutputModel):
    rest_name = "Stop"

    id: int
    in_force: bool
    scope: Annotated[str, choices(StopSwitch.Scope.choices)]
    agent: str | None
    vm: str | None
    reason: str
    stopped_by: str
    stopped_at: datetime
    lifted_by: str | None
    lifted_at: datetime | None
    lift_note: str | None


class StopListOut(RootModel[list[StopOut]]):
    pass


class PolicyOut(OutputModel):
    rest_name = "Policy"

    version: int
    changed_at: datetime | None
    changed_by: str | None
    what: str | None
    stops_in_force: list[StopOut]


def stop_out(stop: StopSwitch) -> StopOut:
    return StopOut(
        id=stop.pk,
        in_force=stop.active,
        scope=stop.scope,
        agent=stop.agent_name or None,
        vm=stop.vm or None,
        reason=stop.reason,
        stopped_by=stop.stopped_by,
        stopped_at=stop.stopped_at,
        lifted_by=stop.lifted_by or None,
        lifted_at=stop.lifted_at,
        lift_note=stop.lift_note or None,
    )


class StopListApi(APIView):
    """The stops, newest first (``?in_force=true`` for those in force); POST engages one."""

    permission_classes = [HasModelPermission]
    required_permissions = {"GET": "rewind.view_stopswitch", "POST": "rewind.add_stopswitch"}

    class InputSerializer(serializers.Serializer):
        scope = serializers.ChoiceField(choices=StopSwitch.Scope.choices)
        agent_id = serializers.IntegerField(required=False, help_text="the agent's id (scope agent)")
        vm = serializers.CharField(required=False, max_length=255, default="", help_text="the VM's name (scope vm)")
        reason = serializers.CharField(max_length=500)

    @extend_schema(responses=StopListOut)
    def get(self, request: Request) -> Response:
        raw = request.query_params.get("in_force")
        in_force = None if raw is None else raw.lower() in ("true", "1", "yes")
        return Response(rest_body(StopListOut([stop_out(s) for s in stop_list(in_force=in_force)])))

    @extend_schema(request=InputSerializer, responses={201: StopOut})
    def post(self, request: Request) -> Response:
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        fields = data.validated_data
        stop = stop_engage(
            actor=actor_of(request),
            scope=fields["scope"],
            agent_id=fields.get("agent_id"),
            vm=fields.get("vm", ""),
            reason=fields["reason"],
            request_id=request_id_of(request),
        )
        return Response(rest_body(stop_out(stop)), status=201)


class StopLiftApi(APIView):
    """Lift a stop in force; guarded changes in its scope go ahead again from the next call."""

    permission_classes = [HasModelPermission]
    required_permissions = {"POST": "rewind.change_stopswitch"}

    class InputSerializer(serializers.Serializer):
        note = serializers.CharField(max_length=500, required=False, allow_blank=True, default="")

    @extend_schema(request=InputSerializer, responses=StopOut)
    def post(self, request: Request, pk: int) -> Response:
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        stop = stop_get(pk)
        if stop is None:
            raise NotFoundError(f"there is no stop #{pk}")
        lifted = stop_lift(
            actor=actor_of(request), stop=stop, note=data.validated_data["note"], request_id=request_id_of(request)
        )
        return Response(rest_body(stop_out(lifted)))


class PolicyApi(APIView):
    """The policy's version (raised by every change of a decision) and the stops in force."""

    permission_classes = [HasModelPermission]
    required_permissions = {"GET": "rewind.view_stopswitch"}

    @extend_schema(responses=PolicyOut)
    def get(self, request: Request) -> Response:
        row = policy_version_row()
        out = PolicyOut(
            version=row.n,
            changed_at=row.changed_at,
            changed_by=row.changed_by or None,
            what=row.what or None,
            stops_in_force=[stop_out(s) for s in stop_list(in_force=True)],
        )
        return Response(rest_body(out))
