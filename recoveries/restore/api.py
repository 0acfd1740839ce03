"""REST for restores in place: the diff a person must read, the write-back click, and which upstream
tools write and read guest files. The click takes the ``diff`` token of the diff shown: without it, or
with an older diff's, it is refused, so no bytes are written that nobody was shown."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from recoveries.api import CanReview
from recoveries.presenters import RecoveryRecordOut, recovery_dict
from recoveries.restore.guest_tools import guest_file_tools_remove, guest_file_tools_set
from recoveries.restore.models import GuestFileTools
from recoveries.restore.presenters import (
    GuestFileToolsListOut,
    GuestFileToolsOut,
    RecoveryDiffOut,
    diff_out,
    folder_diff_out,
)
from recoveries.restore.services import (
    recovery_restore_confirm,
    recovery_restore_decline,
    restore_diff,
    restore_folder_diffs,
)
from recoveries.selectors import recovery_get
from rewind.gateway.selectors import upstream_get
from rewind.lib.errors import NotFoundError
from rewind.lib.rest.outputs import rest_body
from rewind.lib.rest.permissions import HasModelPermission, actor_of, request_id_of


class RecoveryDiffApi(APIView):
    """The file in the guest now against the checkpoint's: a unified diff for text, sizes and sha256 always."""

    permission_classes = [CanReview]

    @extend_schema(responses=RecoveryDiffOut)
    def get(self, request: Request, pk: int) -> Response:
        recovery = recovery_get(recovery_id=pk)
        if recovery.recursive:
            files = restore_folder_diffs(recovery)
            out = folder_diff_out(recovery, files) if files is not None else None
        else:
            diff = restore_diff(recovery)
            out = diff_out(recovery, diff) if diff is not None else None
        if out is None:
            what = "folder" if recovery.recursive else "file"
            raise NotFoundError(f"recovery #{pk} has no diff yet (it is {recovery.status}; the {what} is pulled first)")
        return Response(rest_body(out))


class RecoveryWriteBackApi(APIView):
    """Write the recovered file back into the guest (the second click), after reading its diff."""

    permission_classes = [CanReview]

    class InputSerializer(serializers.Serializer):
        diff = serializers.CharField(max_length=64, help_text="The diff token of the diff endpoint.")

    @extend_schema(request=InputSerializer, responses=RecoveryRecordOut)
    def post(self, request: Request, pk: int) -> Response:
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        recovery = recovery_restore_confirm(
            recovery_id=pk, user=request.user, seen=data.validated_data["diff"], request_id=request_id_of(request)
        )
        return Response(recovery_dict(recovery_get(recovery_id=recovery.pk)))


class RecoveryNoWriteBackApi(APIView):
    """Do not write the file back: the request ends with its bytes, nothing written into the guest."""

    permission_classes = [CanReview]

    @extend_schema(request=None, responses=RecoveryRecordOut)
    def post(self, request: Request, pk: int) -> Response:
        recovery = recovery_restore_decline(recovery_id=pk, user=request.user, request_id=request_id_of(request))
        return Response(recovery_dict(recovery_get(recovery_id=recovery.pk)))


class GuestFileToolsInputSerializer(serializers.Serializer):
    upstream_id = serializers.IntegerField()
    os = serializers.ChoiceField(choices=GuestFileTools.Os.choices)
    vm_pattern = serializers.CharField(max_length=255, required=False, default="*")
    writer_tool = serializers.CharField(max_length=200)
    reader_tool = serializers.CharField(max_length=200, required=False, allow_blank=True, default="")
    vm_arg = serializers.CharField(max_length=100, required=False, allow_blank=True, default="host")
    path_arg = serializers.CharField(max_length=100, required=False, default="path")
    content_arg = serializers.CharField(max_length=100, required=False, default="content")
    reader_vm_arg = serializers.CharField(max_length=100, required=False, allow_blank=True, default="")
    reader_path_arg = serializers.CharField(max_length=100, required=False, allow_blank=True, default="")
    content_encoding = serializers.ChoiceField(choices=GuestFileTools.Encoding.choices, default="utf-8")
    encoding_arg = serializers.CharField(max_length=100, required=False, allow_blank=True, default="")
    enabled = serializers.BooleanField(required=False, default=True)


class GuestFileToolsListApi(APIView):
    """The upstream tools that write a file into a guest and read one, per upstream, platform and VMs.

    POST sets them (creates, or changes the row of the same upstream, platform and VM pattern)."""

    permission_classes = [HasModelPermission]
    required_permissions = {"GET": "recoveries.view_guestfiletools", "POST": "recoveries.add_guestfiletools"}

    @extend_schema(responses=GuestFileToolsListOut)
    def get(self, request: Request) -> Response:
        rows = GuestFileTools.objects.select_related("upstream")
        return Response(rest_body(GuestFileToolsListOut.model_validate(rows)))

    @extend_schema(request=GuestFileToolsInputSerializer, responses={201: GuestFileToolsOut})
    def post(self, request: Request) -> Response:
        data = GuestFileToolsInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        fields: dict[str, Any] = dict(data.validated_data)
        try:
            upstream = upstream_get(fields.pop("upstream_id"))
        except NotFoundError as exc:
            raise serializers.ValidationError({"upstream_id": [exc.message]}) from None
        row = guest_file_tools_set(actor=actor_of(request), upstream=upstream, **fields)
        return Response(rest_body(GuestFileToolsOut.model_validate(row)), status=status.HTTP_201_CREATED)


class GuestFileToolsDetailApi(APIView):
    permission_classes = [HasModelPermission]
    required_permissions = {"DELETE": "recoveries.delete_guestfiletools"}

    @extend_schema(responses={204: None})
    def delete(self, request: Request, pk: int) -> Response:
        guest_file_tools_remove(actor=actor_of(request), tools_id=pk)
        return Response(status=status.HTTP_204_NO_CONTENT)
