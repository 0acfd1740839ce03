"""REST for people (session + CSRF): list, ask, detail, approve, deny, and the file download.

An agent's bearer token is taken only by the download of that agent's own file (the URL
``zerto_recovery_status`` hands out): it never asks or approves here, and nobody approves their own request.
"""

from __future__ import annotations

from typing import Any

from django.http import FileResponse
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import authentication, exceptions, permissions, serializers, status
from rest_framework.parsers import JSONParser
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from recoveries.models import RecoveryRequest
from recoveries.paths import MAX_PATH_LENGTH, GuestPathError
from recoveries.presenters import (
    RecoveryListOut,
    RecoveryRecordOut,
    purged_message,
    recovery_dict,
    recovery_record_out,
    stored_file,
)
from recoveries.selectors import recovery_get, recovery_list
from recoveries.services import (
    APPROVE_PERMISSION,
    ASK_PERMISSION,
    MAX_REASON_LENGTH,
    recovery_request_approve,
    recovery_request_create,
    recovery_request_deny,
)
from rewind.agents import hash_token
from rewind.agents.models import Agent
from rewind.agents.selectors import agent_token_active
from rewind.lib.errors import NotFoundError
from rewind.lib.rest.fields import StrictBooleanField
from rewind.lib.rest.permissions import request_id_of
from rewind.lib.rest.schema import ErrorSerializer

REVIEW_PERMISSIONS = (APPROVE_PERMISSION, "recoveries.view_recoveryrequest")


class CanReview(permissions.BasePermission):
    message = "you lack the permission to review recoveries"

    def has_permission(self, request: Request, view: Any) -> bool:
        return _staff_person(request) and any(request.user.has_perm(p) for p in REVIEW_PERMISSIONS)

    def describe(self, view: Any, method: str) -> str:
        return f"a signed-in staff user holding `{REVIEW_PERMISSIONS[0]}` or `{REVIEW_PERMISSIONS[1]}`."


def _staff_person(request: Request) -> bool:
    user = request.user
    return bool(user and user.is_authenticated and not isinstance(user, AgentPrincipal) and user.is_staff)


class CanReviewOrAsk(permissions.BasePermission):
    """The list of recoveries: reading it as ``CanReview``; POST (asking for one) needs the add permission."""

    def has_permission(self, request: Request, view: Any) -> bool:
        if request.method != "POST":
            self.message = CanReview.message
            return CanReview().has_permission(request, view)
        self.message = "you lack the permission to ask for recoveries"
        return _staff_person(request) and bool(request.user.has_perm(ASK_PERMISSION))

    def describe(self, view: Any, method: str) -> str:
        if method == "POST":
            return f"a signed-in staff user holding `{ASK_PERMISSION}`."
        return CanReview().describe(view, method)


class AgentPrincipal:
    """``request.user`` when an agent's bearer token authenticated the call."""

    is_authenticated = True
    is_staff = False

    def __init__(self, agent: Agent) -> None:
        self.agent = agent

    def has_perm(self, perm: str) -> bool:
        return False


class AgentTokenAuthentication(authentication.BaseAuthentication):
    """``Authorization: Bearer rwd_...``: one indexed lookup of the token's SHA-256."""

    def authenticate(self, request: Request) -> tuple[AgentPrincipal, None] | None:
        header = authentication.get_authorization_header(request).decode("latin-1")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return None
        row = agent_token_active(token_hash=hash_token(token.strip()))
        if row is None:
            raise exceptions.AuthenticationFailed("unknown, revoked or expired token")
        return AgentPrincipal(row.agent), None

    def authenticate_header(self, request: Request) -> str:
        return 'Bearer realm="zerto-rewind"'


class AgentTokenScheme(OpenApiAuthenticationExtension):
    """How the API's schema names ``AgentTokenAuthentication``."""

    target_class = AgentTokenAuthentication
    name = "agentToken"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "An agent's bearer token (rwd_...); accepted only by the download of that agent's file.",
        }


class RecoveryListApi(APIView):
    """Recovery requests, newest first (at most 500); POST asks for one, as a person.

    A person's request waits for approval like an agent's; someone else must approve it (and confirm
    its write-back, with ``restore``)."""

    permission_classes = [CanReviewOrAsk]
    # JSON only: its true and false are the only booleans taken.
    parser_classes = [JSONParser]

    class FilterSerializer(serializers.Serializer):
        status = serializers.ChoiceField(required=False, choices=RecoveryRequest.Status.choices)

    class InputSerializer(serializers.Serializer):
        vm = serializers.CharField(max_length=255, help_text="The VM's name, hostname or identifier.")
        path = serializers.CharField(
            max_length=MAX_PATH_LENGTH,
            trim_whitespace=False,
            help_text="The absolute guest path: /etc/nginx/nginx.conf or C:\\inetpub\\web.config; "
            "a folder with recursive.",
        )
        reason = serializers.CharField(max_length=MAX_REASON_LENGTH, help_text="Shown to the approver.")
        checkpoint = serializers.CharField(
            required=False, max_length=255, help_text="A tag this service put on a checkpoint, or a checkpoint id."
        )
        change_id = serializers.CharField(required=False, max_length=100, help_text="The guarded change to go back to.")
        before_call = serializers.CharField(
            required=False,
            max_length=64,
            help_text="Undo a gateway call (any agent's): the newest journal checkpoint before it.",
        )
        point_in_time = serializers.CharField(
            required=False, max_length=64, help_text="Undo since a time (ISO 8601 with its zone)."
        )
        recursive = StrictBooleanField(required=False, default=False, help_text="path is a folder: all of it.")
        restore = StrictBooleanField(
            required=False,
            default=False,
            help_text="Write it back into the guest once approved, and once someone else has read the diff and "
            "confirmed; refused when no writer tool serves the VM.",
        )

    @extend_schema(operation_id="recoveries_list", responses=RecoveryListOut)
    def get(self, request: Request) -> Response:
        filters = self.FilterSerializer(data=request.query_params)
        filters.is_valid(raise_exception=True)
        rows = recovery_list(status=filters.validated_data.get("status"))[:500]
        return Response(RecoveryListOut(results=[recovery_record_out(r) for r in rows]).model_dump(mode="json"))

    @extend_schema(
        operation_id="recoveries_create",
        responses={
            201: RecoveryRecordOut,
            404: OpenApiResponse(
                ErrorSerializer, description="No such VM, guarded change or gateway call; nothing was recorded."
            ),
        },
    )
    def post(self, request: Request) -> Response:
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        try:
            recovery = recovery_request_create(
                person=request.user, request_id=request_id_of(request), **data.validated_data
            )
        except GuestPathError as exc:
            raise serializers.ValidationError({"path": [exc.message]}) from None
        return Response(recovery_dict(recovery_get(recovery_id=recovery.pk)), status=status.HTTP_201_CREATED)


class RecoveryDetailApi(APIView):
    permission_classes = [CanReview]

    @extend_schema(responses=RecoveryRecordOut)
    def get(self, request: Request, pk: int) -> Response:
        return Response(recovery_dict(recovery_get(recovery_id=pk)))


class RecoveryApproveApi(APIView):
    """Approve a pending request; the run starts once enough people approved. The agent's own
    owner may not approve, and an agent's token is not accepted here."""

    permission_classes = [CanReview]

    @extend_schema(responses=RecoveryRecordOut)
    def post(self, request: Request, pk: int) -> Response:
        recovery = recovery_request_approve(recovery_id=pk, user=request.user, request_id=getattr(request, "id", None))
        return Response(recovery_dict(recovery_get(recovery_id=recovery.pk)))


class RecoveryDenyApi(APIView):
    """Deny a pending request, with an optional note the agent is shown."""

    permission_classes = [CanReview]

    class InputSerializer(serializers.Serializer):
        note = serializers.CharField(required=False, allow_blank=True, max_length=500)

    @extend_schema(responses=RecoveryRecordOut)
    def post(self, request: Request, pk: int) -> Response:
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        recovery = recovery_request_deny(
            recovery_id=pk,
            user=request.user,
            note=data.validated_data.get("note", ""),
            request_id=getattr(request, "id", None),
        )
        return Response(recovery_dict(recovery_get(recovery_id=recovery.pk)))


class RecoveryDownloadApi(APIView):
    """The recovered file's bytes, or a folder's zip; ``X-Content-SHA256`` carries their sha256."""

    authentication_classes = [AgentTokenAuthentication, authentication.SessionAuthentication]
    permission_classes = [permissions.IsAuthenticated]
    permission_description = (
        "the bearer token of the agent that asked for the file, or a signed-in staff user holding "
        f"`{REVIEW_PERMISSIONS[0]}` or `{REVIEW_PERMISSIONS[1]}`."
    )

    @extend_schema(
        responses={
            (200, "application/octet-stream"): OpenApiResponse(OpenApiTypes.BINARY, description="The file."),
            (200, "application/zip"): OpenApiResponse(
                OpenApiTypes.BINARY,
                description="A folder's files (a recursive recovery), one member per manifest entry.",
            ),
            404: OpenApiResponse(
                ErrorSerializer,
                description="No such recovery of this agent, or no file to download (not succeeded, or deleted "
                "after the retention period).",
            ),
        }
    )
    def get(self, request: Request, pk: int) -> FileResponse:
        recovery = recovery_get(recovery_id=pk)
        user = request.user
        if isinstance(user, AgentPrincipal):
            if recovery.agent_id != user.agent.pk:
                raise NotFoundError(f"there is no recovery #{pk} of agent {user.agent.name}")
        elif not CanReview().has_permission(request, self):
            raise exceptions.PermissionDenied(CanReview.message)
        if recovery.purged_at is not None:
            raise NotFoundError(f"recovery #{pk}: {purged_message(recovery)}")
        path = stored_file(recovery)
        if path is None:
            raise NotFoundError(f"recovery #{pk} has no recovered file to download ({recovery.status})")
        # A folder (recursive) is kept as one zip of its files; its manifest is in the recovery's result.
        kind = "application/zip" if recovery.recursive else "application/octet-stream"
        response = FileResponse(path.open("rb"), as_attachment=True, filename=path.name, content_type=kind)
        response["X-Content-SHA256"] = recovery.sha256
        return response
