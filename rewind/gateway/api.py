"""The gateway over REST: upstreams (list, create, update, test connection), their tools (policy,
approval) and the calls forwarded. On update an omitted ``headers``/``env`` keeps the stored ones;
``{}`` removes them."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from rewind.gateway.links import UpstreamUnavailable
from rewind.gateway.listing import upstream_tools_refresh
from rewind.gateway.models import Policy, Upstream
from rewind.gateway.presenters import GatewayCallOut, UpstreamCheckOut, UpstreamOut, UpstreamToolOut, upstream_out
from rewind.gateway.selectors import (
    gateway_call_list,
    upstream_get,
    upstream_links_said,
    upstream_links_up,
    upstream_list,
    upstream_tool_get,
)
from rewind.gateway.services import (
    upstream_command_clean,
    upstream_create,
    upstream_tool_approve,
    upstream_tool_set_policy,
    upstream_update,
    upstream_url_clean,
)
from rewind.lib.errors import field_checked
from rewind.lib.rest.outputs import rest_body
from rewind.lib.rest.pagination import BoundedLimitOffsetPagination, paginated_response
from rewind.lib.rest.permissions import HasModelPermission, actor_of


class UpstreamInputSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=40)
    transport = serializers.ChoiceField(choices=Upstream.Transport.choices, default=Upstream.Transport.HTTP)
    url = serializers.CharField(max_length=500, required=False, allow_blank=True, default="")
    headers = serializers.DictField(
        child=serializers.CharField(allow_blank=True, trim_whitespace=False), required=False
    )
    command = serializers.ListField(child=serializers.CharField(), required=False, default=list)
    env = serializers.DictField(child=serializers.CharField(allow_blank=True, trim_whitespace=False), required=False)
    enabled = serializers.BooleanField(required=False, default=True)
    connect_timeout_s = serializers.FloatField(required=False, default=10.0)
    call_timeout_s = serializers.FloatField(required=False, default=300.0)
    default_policy = serializers.ChoiceField(choices=Policy.choices, default=Policy.GUARD_IF_PROTECTED)
    host_vm = serializers.CharField(max_length=255, required=False, allow_blank=True, default="")

    # A URL or command the service would refuse is bad input (400, under its field), like a site's
    # base URL; the other transport's field stays empty, and the service checks the pair.
    def validate_url(self, value: str) -> str:
        return field_checked(upstream_url_clean, value, serializers.ValidationError) if value.strip() else value

    def validate_command(self, value: list[str]) -> list[str]:
        return field_checked(upstream_command_clean, value, serializers.ValidationError) if value else value


class UpstreamListApi(APIView):
    """Upstream MCP servers whose tools agents call through /mcp."""

    permission_classes = [HasModelPermission]
    required_permissions = {"GET": "rewind.view_upstream", "POST": "rewind.add_upstream"}
    pagination_class = BoundedLimitOffsetPagination

    @extend_schema(responses=UpstreamOut)
    def get(self, request: Request) -> Response:
        return paginated_response(queryset=upstream_list(), present=upstream_out, request=request, view=self)

    @extend_schema(
        request=UpstreamInputSerializer,
        responses={201: UpstreamOut},
        description="Add an upstream (audited).",
    )
    def post(self, request: Request) -> Response:
        data = UpstreamInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        upstream = upstream_create(actor=actor_of(request), **data.validated_data)
        return Response(rest_body(upstream_out(upstream)), status=status.HTTP_201_CREATED)


class UpstreamDetailApi(APIView):
    """An upstream. The name cannot change: exposed names and catalog entries are built from it."""

    permission_classes = [HasModelPermission]
    required_permissions = {"GET": "rewind.view_upstream", "PATCH": "rewind.change_upstream"}

    @extend_schema(responses=UpstreamOut)
    def get(self, request: Request, pk: int) -> Response:
        return Response(rest_body(upstream_out(upstream_get(pk))))

    @extend_schema(request=UpstreamInputSerializer, responses=UpstreamOut)
    def patch(self, request: Request, pk: int) -> Response:
        upstream = upstream_get(pk)
        data = UpstreamInputSerializer(data=request.data, partial=True)
        data.is_valid(raise_exception=True)
        fields: dict[str, Any] = dict(data.validated_data)
        if "name" in fields and fields.pop("name").strip().lower() != upstream.name:
            raise serializers.ValidationError({"name": "an upstream's name cannot change; add a new upstream instead"})
        upstream = upstream_update(actor=actor_of(request), upstream=upstream, **fields)
        return Response(rest_body(upstream_out(upstream)))


class UpstreamCheckApi(APIView):
    """Connect and list the upstream's tools (stored, refused collisions named). A failure is in the body."""

    permission_classes = [HasModelPermission]
    required_permissions = {"POST": "rewind.change_upstream"}

    @extend_schema(request=None, responses=UpstreamCheckOut)
    def post(self, request: Request, pk: int) -> Response:
        upstream = upstream_get(pk)
        links = {
            "links_down": upstream_links_said(upstream),
            "links_up": [row.process for row in upstream_links_up(upstream)],
        }
        try:
            report = upstream_tools_refresh(upstream)
        except UpstreamUnavailable as exc:
            return Response(rest_body(UpstreamCheckOut.model_validate({"ok": False, "error": exc.message, **links})))
        detail = upstream_out(upstream_get(pk))  # as the listing left it
        body = {"ok": True, "error": None, **vars(report), **links, "upstream_detail": detail}
        return Response(rest_body(UpstreamCheckOut.model_validate(body)))


class UpstreamToolPolicyApi(APIView):
    """Set one tool's policy (``""``: read-only tools pass, others follow the upstream's default)."""

    permission_classes = [HasModelPermission]
    required_permissions = {"POST": "rewind.change_upstreamtool"}

    @extend_schema(
        request={"application/json": {"type": "object", "properties": {"policy": {"type": "string"}}}},
        responses=UpstreamToolOut,
    )
    def post(self, request: Request, pk: int) -> Response:
        tool = upstream_tool_get(pk)
        policy = request.data.get("policy", "") if isinstance(request.data, dict) else None
        if not isinstance(policy, str):
            raise serializers.ValidationError({"policy": "give a string: pass, guard-if-protected, hold or empty"})
        changed = upstream_tool_set_policy(actor=actor_of(request), tool=tool, policy=policy)
        return Response(rest_body(UpstreamToolOut.model_validate(changed)))


class UpstreamToolApproveApi(APIView):
    """Approve a tool's definition as listed now: ``digest`` must be the one the caller read (its ``digest``),
    so a definition that changed again meanwhile is not approved unseen (409)."""

    permission_classes = [HasModelPermission]
    required_permissions = {"POST": "rewind.change_upstreamtool"}

    @extend_schema(
        request={"application/json": {"type": "object", "properties": {"digest": {"type": "string"}}}},
        responses=UpstreamToolOut,
    )
    def post(self, request: Request, pk: int) -> Response:
        tool = upstream_tool_get(pk)
        seen = request.data.get("digest") if isinstance(request.data, dict) else None
        if not isinstance(seen, str) or not seen:
            raise serializers.ValidationError(
                {"digest": "give the digest of the definition you read (the tool's digest)"}
            )
        approved = upstream_tool_approve(actor=actor_of(request), tool=tool, seen_digest=seen)
        return Response(rest_body(UpstreamToolOut.model_validate(approved)))


class GatewayCallListApi(APIView):
    """Calls agents made through the gateway, newest first; ``?agent=`` and ``?decision=`` filter."""

    permission_classes = [HasModelPermission]
    required_permissions = {"GET": "rewind.view_gatewaycall"}
    pagination_class = BoundedLimitOffsetPagination

    @extend_schema(responses=GatewayCallOut)
    def get(self, request: Request) -> Response:
        calls = gateway_call_list(
            agent=request.query_params.get("agent"), decision=request.query_params.get("decision")
        )
        return paginated_response(queryset=calls, present=GatewayCallOut.model_validate, request=request, view=self)
