"""Agents over REST: list, detail, create; issue a bearer token (shown once, never its hash) and revoke one."""

from __future__ import annotations

from typing import Any, cast

from django.contrib.auth.models import User
from django.utils import timezone
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from rewind.agents.presenters import AgentOut, AgentTokenIssuedOut, AgentTokenRevokedOut
from rewind.agents.selectors import agent_get, agent_list, agent_name_taken, agent_owner_candidate, agent_token_get
from rewind.agents.services import agent_create, agent_token_issue, agent_token_revoke, agent_update
from rewind.lib.rest.outputs import rest_body
from rewind.lib.rest.pagination import BoundedLimitOffsetPagination, paginated_response
from rewind.lib.rest.permissions import HasModelPermission, actor_of, request_id_of
from rewind.mcp import scopes


class AgentListApi(APIView):
    """The agents allowed to call /mcp, each with its tokens (never their values)."""

    permission_classes = [HasModelPermission]
    required_permissions = {"GET": "rewind.view_agent", "POST": "rewind.add_agent"}
    pagination_class = BoundedLimitOffsetPagination

    class InputSerializer(serializers.Serializer):
        name = serializers.SlugField(max_length=64)
        owner = serializers.CharField(required=False, max_length=150, help_text="username; you when omitted")
        description = serializers.CharField(required=False, allow_blank=True, max_length=255, default="")

        def validate_name(self, value: str) -> str:
            if agent_name_taken(value):
                raise serializers.ValidationError(f"an agent named {value!r} already exists")
            return value

        def validate_owner(self, value: str) -> User:
            owner = agent_owner_candidate(value)
            if owner is None:
                raise serializers.ValidationError(f"there is no active user {value!r}")
            return owner

    @extend_schema(responses=AgentOut)
    def get(self, request: Request) -> Response:
        return paginated_response(queryset=agent_list(), present=AgentOut.model_validate, request=request, view=self)

    @extend_schema(responses={201: AgentOut}, description="Add an agent (audited); issue it a token next.")
    def post(self, request: Request) -> Response:
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        agent = agent_create(
            actor=actor_of(request),
            name=data.validated_data["name"],
            owner=data.validated_data.get("owner") or cast(User, request.user),
            description=data.validated_data["description"],
            request_id=request_id_of(request),
        )
        return Response(rest_body(AgentOut.model_validate(agent_get(agent.pk))), status=status.HTTP_201_CREATED)


class AgentDetailApi(APIView):
    """Detail, and PATCH of ``is_active``/``description`` and the VM limit (``limit_vm_names``, ``limit_vpgs``,
    ``limit_sites``: one entry a line); the name is fixed: tags carry it.

    Deactivating stops the agent's tokens within MCP_TOKEN_CACHE_S seconds."""

    permission_classes = [HasModelPermission]
    required_permissions = {"GET": "rewind.view_agent", "PATCH": "rewind.change_agent"}

    class InputSerializer(serializers.Serializer):
        is_active = serializers.BooleanField(required=False)
        description = serializers.CharField(required=False, allow_blank=True, max_length=255)
        changes_need_approval = serializers.BooleanField(required=False)
        limit_vm_names = serializers.CharField(required=False, allow_blank=True, max_length=10_000)
        limit_vpgs = serializers.CharField(required=False, allow_blank=True, max_length=10_000)
        limit_sites = serializers.CharField(required=False, allow_blank=True, max_length=10_000)

        def to_internal_value(self, data: Any) -> Any:
            if hasattr(data, "keys") and "name" in data:
                raise serializers.ValidationError({"name": "an agent's name cannot change: its tags carry it"})
            return super().to_internal_value(data)

    @extend_schema(responses=AgentOut)
    def get(self, request: Request, pk: int) -> Response:
        return Response(rest_body(AgentOut.model_validate(agent_get(pk))))

    @extend_schema(responses=AgentOut)
    def patch(self, request: Request, pk: int) -> Response:
        agent = agent_get(pk)
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        agent_update(actor=actor_of(request), agent=agent, request_id=request_id_of(request), **data.validated_data)
        return Response(rest_body(AgentOut.model_validate(agent_get(pk))))


class AgentTokenIssueApi(APIView):
    """Issue a token. The response is the only place the token ever appears."""

    permission_classes = [HasModelPermission]
    required_permissions = {"POST": "rewind.add_agenttoken"}

    class InputSerializer(serializers.Serializer):
        # The metaclass collects declared fields, so this does not clash with Field.label.
        label = serializers.CharField(  # type: ignore[assignment]
            required=False, allow_blank=True, max_length=100, default=""
        )
        expires_at = serializers.DateTimeField(required=False, allow_null=True, default=None)
        scope = serializers.MultipleChoiceField(
            choices=list(scopes.ALL), required=False, help_text="what the token may do (default: every scope)"
        )

        def validate_expires_at(self, value: object) -> object:
            if value is not None and value <= timezone.now():  # type: ignore[operator]
                raise serializers.ValidationError("the expiry must be in the future")
            return value

    @extend_schema(responses={201: AgentTokenIssuedOut})
    def post(self, request: Request, pk: int) -> Response:
        agent = agent_get(pk)
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        fields = dict(data.validated_data)
        granted = tuple(fields.pop("scope", None) or scopes.ALL)
        issued = agent_token_issue(
            actor=actor_of(request), agent=agent, request_id=request_id_of(request), granted=granted, **fields
        )
        body = rest_body(AgentTokenIssuedOut.of(issued.row, token=issued.token))
        response = Response(body, status=status.HTTP_201_CREATED)
        response["Cache-Control"] = "no-store"
        return response


class AgentTokenRevokeApi(APIView):
    """Revoke a token; revoking a revoked token changes nothing (``revoked: false``)."""

    permission_classes = [HasModelPermission]
    required_permissions = {"POST": "rewind.change_agenttoken"}

    @extend_schema(responses=AgentTokenRevokedOut)
    def post(self, request: Request, pk: int, token_id: int) -> Response:
        agent = agent_get(pk)
        token = agent_token_get(agent=agent, token_id=token_id)
        revoked = agent_token_revoke(actor=actor_of(request), token=token, request_id=request_id_of(request))
        token = agent_token_get(agent=agent, token_id=token_id)  # as revoking left it
        return Response(rest_body(AgentTokenRevokedOut.model_validate({"revoked": revoked, "token": token})))
