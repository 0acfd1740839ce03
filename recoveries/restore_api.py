"""REST for restores in place: the diff a person must read, the write-back click, and which upstream
tools write and read guest files (``GuestFileTools``).

The write-back click takes the ``diff`` token the diff endpoint handed out: a click without it, or
with the token of an older diff, is refused, so no bytes are written that nobody was shown.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from recoveries.api import CanReview
from recoveries.models import RecoveryRequest
from recoveries.presenters import RecoveryRecordOut, recovery_dict
from recoveries.restore import (
    diff_token,
    recovery_restore_confirm,
    recovery_restore_decline,
    restore_diff,
    restore_folder_diffs,
)
from recoveries.restore_files import UNCHANGED, FolderFileDiff
from recoveries.restore_models import GuestFileTools
from recoveries.restore_tools import EDITABLE, guest_file_tools_remove, guest_file_tools_set
from recoveries.selectors import recovery_get
from rewind.errors import NotFoundError
from rewind.gateway.selectors import upstream_get
from rewind.rest.permissions import HasModelPermission, actor_of, request_id_of

DiffSerializer = inline_serializer(
    "RecoveryDiff",
    {
        "diff": serializers.CharField(help_text="Give it to write-back: it names the diff you were shown."),
        "text": serializers.BooleanField(),
        "identical": serializers.BooleanField(),
        "current_size": serializers.IntegerField(allow_null=True),
        "current_sha256": serializers.CharField(),
        "current_error": serializers.CharField(),
        "recovered_size": serializers.IntegerField(),
        "recovered_sha256": serializers.CharField(),
        "unified_diff": serializers.CharField(),
        "hidden_lines": serializers.IntegerField(),
        "files": serializers.ListField(
            child=serializers.DictField(),
            required=False,
            help_text="A folder: per file its path, change (unchanged, changed or new), sizes, sha256 and "
            "unified_diff (empty for unchanged or binary files, or once the page's line budget is spent).",
        ),
    },
)


class RecoveryDiffApi(APIView):
    """The file in the guest now against the checkpoint's: a unified diff for text, sizes and sha256 always."""

    permission_classes = [CanReview]

    @extend_schema(responses=DiffSerializer)
    def get(self, request: Request, pk: int) -> Response:
        recovery = recovery_get(recovery_id=pk)
        if recovery.recursive:
            return self._folder(recovery)
        diff = restore_diff(recovery)
        if diff is None:
            raise NotFoundError(f"recovery #{pk} has no diff yet (it is {recovery.status}; the file is pulled first)")
        return Response(
            {
                "diff": diff_token(recovery),
                "text": diff.text,
                "identical": diff.identical,
                "current_size": diff.current_size,
                "current_sha256": diff.current_sha256,
                "current_error": recovery.current_error,
                "recovered_size": diff.recovered_size,
                "recovered_sha256": diff.recovered_sha256,
                "unified_diff": "\n".join(line.text for line in diff.lines),
                "hidden_lines": diff.hidden_lines,
            }
        )

    def _folder(self, recovery: RecoveryRequest) -> Response:
        files = restore_folder_diffs(recovery)
        if files is None:
            raise NotFoundError(
                f"recovery #{recovery.pk} has no diff yet (it is {recovery.status}; the folder is pulled first)"
            )
        shown = [_folder_file(file) for file in files]
        return Response(
            {
                "diff": diff_token(recovery),
                "text": False,
                "identical": all(file.change == UNCHANGED for file in files),
                "current_size": None,
                "current_sha256": recovery.current_sha256,
                "current_error": recovery.current_error,
                "recovered_size": recovery.size,
                "recovered_sha256": recovery.sha256,
                "unified_diff": "\n".join(file["unified_diff"] for file in shown if file["unified_diff"]),
                "hidden_lines": sum(file.diff.hidden_lines for file in files if file.diff is not None),
                "files": shown,
            }
        )


def _folder_file(file: FolderFileDiff) -> dict[str, Any]:
    lines = file.diff.lines if file.diff is not None and file.diff.text else []
    return {
        "path": file.path,
        "change": file.change,
        "current_error": file.current_error,
        "current_size": file.current_size,
        "current_sha256": file.current_sha256,
        "recovered_size": file.recovered_size,
        "recovered_sha256": file.recovered_sha256,
        "text": bool(file.diff is not None and file.diff.text),
        "unified_diff": "\n".join(line.text for line in lines),
    }


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


class GuestFileToolsSerializer(serializers.ModelSerializer):
    upstream = serializers.CharField(source="upstream.name", read_only=True)

    class Meta:
        model = GuestFileTools
        fields = ["id", "upstream", "os", *EDITABLE, "updated_at"]


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

    @extend_schema(responses=GuestFileToolsSerializer(many=True))
    def get(self, request: Request) -> Response:
        rows = GuestFileTools.objects.select_related("upstream")
        return Response(GuestFileToolsSerializer(rows, many=True).data)

    @extend_schema(request=GuestFileToolsInputSerializer, responses={201: GuestFileToolsSerializer})
    def post(self, request: Request) -> Response:
        data = GuestFileToolsInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        fields: dict[str, Any] = dict(data.validated_data)
        try:
            upstream = upstream_get(fields.pop("upstream_id"))
        except NotFoundError as exc:
            raise serializers.ValidationError({"upstream_id": [exc.message]}) from None
        row = guest_file_tools_set(actor=actor_of(request), upstream=upstream, **fields)
        return Response(GuestFileToolsSerializer(row).data, status=status.HTTP_201_CREATED)


class GuestFileToolsDetailApi(APIView):
    permission_classes = [HasModelPermission]
    required_permissions = {"DELETE": "recoveries.delete_guestfiletools"}

    @extend_schema(responses={204: None})
    def delete(self, request: Request, pk: int) -> Response:
        guest_file_tools_remove(actor=actor_of(request), tools_id=pk)
        return Response(status=status.HTTP_204_NO_CONTENT)
