"""The mutating-tool catalog and its sightings over REST, for people (session login + CSRF).

Every write goes through ``catalog.services`` with the person as actor (audited, the human-only
rules hold); classifying a sighting needs ``catalog.add_mutatingtool``, as in the admin."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from catalog.models import MutatingTool, ToolSighting
from catalog.presenters import MutatingToolRecordOut, SightingClassifiedOut, ToolSightingOut
from catalog.selectors import (
    mutating_tool_get,
    mutating_tool_pattern_taken,
    mutating_tool_queryset,
    tool_sighting_get,
    tool_sighting_queryset,
)
from catalog.services import (
    VM_ARG_RE,
    mutating_tool_add,
    mutating_tool_disable,
    mutating_tool_update,
    normalize_pattern,
    tool_sighting_classify_mutating,
    tool_sighting_classify_readonly,
)
from rewind.lib.errors import ApplicationError
from rewind.lib.rest.outputs import rest_body
from rewind.lib.rest.pagination import BoundedLimitOffsetPagination, paginated_response
from rewind.lib.rest.permissions import HasModelPermission, actor_of
from rewind.policy.models import Decision

CLASSIFY = "catalog.add_mutatingtool"


def _vm_arg(value: str) -> str:
    value = value.strip()
    if not VM_ARG_RE.match(value):
        raise serializers.ValidationError("name the tool argument that holds the VM (e.g. host)")
    return value


class MutatingToolListApi(APIView):
    """The catalog's entries: the tools the guard covers, and which argument names the VM."""

    permission_classes = [HasModelPermission]
    pagination_class = BoundedLimitOffsetPagination
    required_permissions = {"GET": "catalog.view_mutatingtool", "POST": "catalog.add_mutatingtool"}

    class FilterSerializer(serializers.Serializer):
        enabled = serializers.BooleanField(required=False, allow_null=True, default=None)
        platform = serializers.ChoiceField(required=False, choices=MutatingTool.Platform.choices)

    class InputSerializer(serializers.Serializer):
        pattern = serializers.CharField(max_length=200)
        vm_arg = serializers.CharField(max_length=100)
        platform = serializers.ChoiceField(choices=MutatingTool.Platform.choices, default=MutatingTool.Platform.ANY)
        description = serializers.CharField(max_length=500)
        decision = serializers.ChoiceField(choices=Decision.choices, default=Decision.CHECKPOINT)
        enabled = serializers.BooleanField(default=True)

        def validate_pattern(self, value: str) -> str:
            try:
                pattern = normalize_pattern(value)
            except ApplicationError as exc:
                raise serializers.ValidationError(exc.message) from None
            if mutating_tool_pattern_taken(pattern):
                raise serializers.ValidationError(f"the catalog already has an entry {pattern!r}")
            return pattern

        def validate_vm_arg(self, value: str) -> str:
            return _vm_arg(value)

    @extend_schema(responses=MutatingToolRecordOut)
    def get(self, request: Request) -> Response:
        filters = self.FilterSerializer(data=request.query_params)
        filters.is_valid(raise_exception=True)
        return paginated_response(
            queryset=mutating_tool_queryset(**filters.validated_data),
            present=MutatingToolRecordOut.model_validate,
            request=request,
            view=self,
        )

    @extend_schema(responses={201: MutatingToolRecordOut}, description="Add an entry (audited).")
    def post(self, request: Request) -> Response:
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        fields = dict(data.validated_data)
        enabled = fields.pop("enabled")
        tool = mutating_tool_add(actor=actor_of(request), **fields)
        if not enabled:
            tool = mutating_tool_disable(actor=actor_of(request), tool=tool)
        return Response(rest_body(MutatingToolRecordOut.model_validate(tool)), status=status.HTTP_201_CREATED)


class MutatingToolDetailApi(APIView):
    """Detail and update. The pattern is the entry's identity and cannot change."""

    permission_classes = [HasModelPermission]
    required_permissions = {"GET": "catalog.view_mutatingtool", "PATCH": "catalog.change_mutatingtool"}

    class InputSerializer(serializers.Serializer):
        vm_arg = serializers.CharField(required=False, max_length=100)
        platform = serializers.ChoiceField(required=False, choices=MutatingTool.Platform.choices)
        description = serializers.CharField(required=False, max_length=500)
        decision = serializers.ChoiceField(required=False, choices=Decision.choices)
        enabled = serializers.BooleanField(required=False)

        def validate_vm_arg(self, value: str) -> str:
            return _vm_arg(value)

        def to_internal_value(self, data: Any) -> Any:
            if hasattr(data, "keys") and "pattern" in data:
                raise serializers.ValidationError({"pattern": "the pattern cannot change; add another entry"})
            return super().to_internal_value(data)

    @extend_schema(responses=MutatingToolRecordOut)
    def get(self, request: Request, pk: int) -> Response:
        return Response(rest_body(MutatingToolRecordOut.model_validate(mutating_tool_get(pk))))

    @extend_schema(responses=MutatingToolRecordOut)
    def patch(self, request: Request, pk: int) -> Response:
        tool = mutating_tool_get(pk)
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        tool = mutating_tool_update(actor=actor_of(request), tool=tool, **data.validated_data)
        return Response(rest_body(MutatingToolRecordOut.model_validate(tool)))


class MutatingToolDisableApi(APIView):
    """Stop an entry from guarding anything; repeating it changes nothing."""

    permission_classes = [HasModelPermission]
    required_permissions = {"POST": "catalog.change_mutatingtool"}

    @extend_schema(responses=MutatingToolRecordOut)
    def post(self, request: Request, pk: int) -> Response:
        tool = mutating_tool_disable(actor=actor_of(request), tool=mutating_tool_get(pk))
        return Response(rest_body(MutatingToolRecordOut.model_validate(tool)))


class ToolSightingListApi(APIView):
    """Tools the guard was asked about that the catalog does not list, with who asked and how often."""

    permission_classes = [HasModelPermission]
    pagination_class = BoundedLimitOffsetPagination
    required_permissions = {"GET": "catalog.view_toolsighting"}

    class FilterSerializer(serializers.Serializer):
        status = serializers.ChoiceField(required=False, choices=ToolSighting.Status.choices)

    @extend_schema(responses=ToolSightingOut)
    def get(self, request: Request) -> Response:
        filters = self.FilterSerializer(data=request.query_params)
        filters.is_valid(raise_exception=True)
        return paginated_response(
            queryset=tool_sighting_queryset(**filters.validated_data),
            present=ToolSightingOut.model_validate,
            request=request,
            view=self,
        )


class ToolSightingClassifyApi(APIView):
    """``{"kind": "mutating", "vm_arg": ...}`` adds the tool to the catalog; ``{"kind": "readonly"}`` ignores it."""

    permission_classes = [HasModelPermission]
    required_permissions = {"POST": CLASSIFY}

    class InputSerializer(serializers.Serializer):
        kind = serializers.ChoiceField(choices=["mutating", "readonly"])
        vm_arg = serializers.CharField(required=False, max_length=100)
        platform = serializers.ChoiceField(choices=MutatingTool.Platform.choices, default=MutatingTool.Platform.ANY)
        description = serializers.CharField(required=False, allow_blank=True, max_length=500, default="")

        def validate_vm_arg(self, value: str) -> str:
            return _vm_arg(value)

        def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
            if attrs["kind"] == "mutating" and not attrs.get("vm_arg"):
                raise serializers.ValidationError({"vm_arg": "name the argument that holds the VM"})
            return attrs

    @extend_schema(responses=SightingClassifiedOut)
    def post(self, request: Request, pk: int) -> Response:
        sighting = tool_sighting_get(pk)
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        args = data.validated_data
        entry = None
        if args["kind"] == "mutating":
            entry = tool_sighting_classify_mutating(
                actor=actor_of(request),
                sighting=sighting,
                vm_arg=args["vm_arg"],
                platform=args["platform"],
                description=args["description"],
            )
        else:
            tool_sighting_classify_readonly(actor=actor_of(request), sighting=sighting)
        sighting = tool_sighting_get(pk)  # as classifying left it
        return Response(rest_body(SightingClassifiedOut.model_validate({"sighting": sighting, "entry": entry})))
