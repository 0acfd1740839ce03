"""Sites over REST: list, detail, create, update and the connection check.

The password, the client secret and their ciphertext never leave the server; a pinned CA is
reported as ``ca_bundle_pinned``. On update an omitted or empty password/secret keeps the
stored one, and an omitted ``ca_bundle`` keeps the pinned certificate ("" unpins it).
"""

from __future__ import annotations

from typing import Any

from django.db import IntegrityError
from drf_spectacular.utils import extend_schema, extend_schema_field, inline_serializer
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from rewind.lib.errors import ApplicationError, field_checked
from rewind.lib.rest.pagination import BoundedLimitOffsetPagination, paginated_response
from rewind.lib.rest.permissions import HasModelPermission, actor_of
from rewind.sites.models import MAX_REQUESTS_PER_S, Site
from rewind.sites.selectors import site_get, site_list, site_name_taken
from rewind.sites.services import (
    SiteCheck,
    site_availability,
    site_base_url_clean,
    site_check,
    site_create,
    site_update,
)

_SECRETS = ("password", "client_secret")


class SiteAvailabilitySerializer(serializers.Serializer):
    """Only for the schema: ``site_availability`` builds the value."""

    available = serializers.BooleanField(help_text="False while disabled or its circuit is open (calls fail at once).")
    since = serializers.DateTimeField(allow_null=True, help_text="When the circuit opened.")
    reason = serializers.CharField(allow_blank=True, help_text="Why it opened; empty while closed.")
    failures = serializers.IntegerField(help_text="Consecutive failed calls.")


class SiteOutputSerializer(serializers.ModelSerializer):
    ca_bundle_pinned = serializers.SerializerMethodField()
    availability = serializers.SerializerMethodField()

    class Meta:
        model = Site
        fields = [
            "id",
            "name",
            "base_url",
            "username",
            "client_id",
            "verify_tls",
            "ca_bundle_pinned",
            "enabled",
            "max_requests_per_s",
            "identifier",
            "site_type",
            "version",
            "identity_checked_at",
            "last_error",
            "availability",
            "created_at",
            "updated_at",
        ]

    @extend_schema_field(SiteAvailabilitySerializer)
    def get_availability(self, site: Site) -> dict[str, Any]:
        """``{available, since, reason, failures}``: whether its ZVM's circuit is closed."""
        info = site_availability(site)
        since = info["since"]
        return {**info, "since": since.isoformat() if since is not None else None}  # type: ignore[attr-defined]

    def get_ca_bundle_pinned(self, site: Site) -> bool:
        return bool(site.ca_bundle)


class SiteInputSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=100)
    base_url = serializers.CharField(max_length=200)
    username = serializers.CharField(max_length=150, required=False, allow_blank=True, default="")
    password = serializers.CharField(required=False, allow_blank=True, trim_whitespace=False, max_length=500)
    client_id = serializers.CharField(max_length=100, required=False, default="zerto-client")
    client_secret = serializers.CharField(required=False, allow_blank=True, trim_whitespace=False, max_length=500)
    verify_tls = serializers.BooleanField(required=False, default=False)
    ca_bundle = serializers.CharField(required=False, allow_blank=True, max_length=100_000)
    enabled = serializers.BooleanField(required=False, default=True)
    # Empty (null): the ZVM_MAX_REQUESTS_PER_S default.
    max_requests_per_s = serializers.FloatField(required=False, allow_null=True, default=None)

    def validate_max_requests_per_s(self, value: float | None) -> float | None:
        if value is not None and not 0 < value <= MAX_REQUESTS_PER_S:
            raise serializers.ValidationError(f"give a number above 0 and at most {MAX_REQUESTS_PER_S:g}")
        return value

    def validate_base_url(self, value: str) -> str:
        return field_checked(site_base_url_clean, value, serializers.ValidationError)

    def validate_name(self, value: str) -> str:
        if site_name_taken(value, other_than=self.instance):
            raise serializers.ValidationError(f"a site named {value.strip()!r} already exists")
        return value.strip()

    def validate_ca_bundle(self, value: str) -> str:
        value = value.strip()
        if value and "-----BEGIN CERTIFICATE-----" not in value:
            raise serializers.ValidationError("paste PEM certificate(s) (-----BEGIN CERTIFICATE-----)")
        return value


def _saved(call: Any, **kwargs: Any) -> Site:
    # The name is unique: a concurrent writer taking it between validation and save is a conflict.
    try:
        return call(**kwargs)
    except IntegrityError:
        raise ApplicationError("a site with that name already exists") from None


class SiteListApi(APIView):
    """The sites (ZVMs) this service talks to. Passwords and client secrets are never returned."""

    permission_classes = [HasModelPermission]
    required_permissions = {"GET": "rewind.view_site", "POST": "rewind.add_site"}
    pagination_class = BoundedLimitOffsetPagination

    @extend_schema(responses=SiteOutputSerializer(many=True))
    def get(self, request: Request) -> Response:
        return paginated_response(
            queryset=site_list(), serializer_class=SiteOutputSerializer, request=request, view=self
        )

    @extend_schema(
        request=SiteInputSerializer, responses={201: SiteOutputSerializer}, description="Add a site (audited)."
    )
    def post(self, request: Request) -> Response:
        data = SiteInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        fields = dict(data.validated_data)
        secrets = {s: fields.pop(s, "") for s in _SECRETS}
        site = _saved(site_create, actor=actor_of(request), **secrets, **fields)
        return Response(SiteOutputSerializer(site).data, status=status.HTTP_201_CREATED)


class SiteDetailApi(APIView):
    """A site. On update an omitted or empty password or client secret keeps the stored one, and an
    omitted ``ca_bundle`` keeps the pinned certificate (``""`` unpins it)."""

    permission_classes = [HasModelPermission]
    required_permissions = {"GET": "rewind.view_site", "PUT": "rewind.change_site", "PATCH": "rewind.change_site"}

    @extend_schema(responses=SiteOutputSerializer)
    def get(self, request: Request, pk: int) -> Response:
        return Response(SiteOutputSerializer(site_get(pk)).data)

    @extend_schema(request=SiteInputSerializer, responses=SiteOutputSerializer)
    def put(self, request: Request, pk: int) -> Response:
        return self._update(request, pk, partial=False)

    @extend_schema(request=SiteInputSerializer, responses=SiteOutputSerializer)
    def patch(self, request: Request, pk: int) -> Response:
        return self._update(request, pk, partial=True)

    def _update(self, request: Request, pk: int, *, partial: bool) -> Response:
        site = site_get(pk)
        data = SiteInputSerializer(site, data=request.data, partial=partial)
        data.is_valid(raise_exception=True)
        fields = dict(data.validated_data)
        # Empty means "keep": the stored secret is never shown, so a form cannot send it back.
        secrets = {s: (fields.pop(s, "") or None) for s in _SECRETS}
        site = _saved(site_update, actor=actor_of(request), site=site, **secrets, **fields)
        return Response(SiteOutputSerializer(site).data)


def _check_dict(result: SiteCheck) -> dict[str, Any]:
    local = result.local
    return {
        "ok": result.ok,
        "identity": None
        if local is None
        else {"identifier": local.identifier, "name": local.name, "type": local.type, "version": local.version},
        "vpg_count": result.vpg_count,
        "error": result.error or None,
        "asked": result.asked,
        "site": SiteOutputSerializer(result.site).data,
    }


class SiteCheckApi(APIView):
    """Log in to the site's ZVM, learn its identity and count VPGs. A failed check is
    reported in the body (``ok: false``, ``error``) and recorded on the site as ``last_error``.

    A site marked unavailable is not asked before its next trial (``asked: false``, ``error``
    says since when and why) unless the body says ``{"force": true}``."""

    permission_classes = [HasModelPermission]
    required_permissions = {"POST": "rewind.change_site"}

    class InputSerializer(serializers.Serializer):
        force = serializers.BooleanField(required=False, default=False)

    @extend_schema(
        responses=inline_serializer(
            "SiteCheckResult",
            {
                "ok": serializers.BooleanField(),
                "identity": inline_serializer(
                    "SiteIdentity",
                    {
                        "identifier": serializers.CharField(),
                        "name": serializers.CharField(),
                        "type": serializers.CharField(),
                        "version": serializers.CharField(),
                    },
                    allow_null=True,
                ),
                "vpg_count": serializers.IntegerField(allow_null=True),
                "error": serializers.CharField(allow_null=True),
                "asked": serializers.BooleanField(help_text="False when an unavailable site was not asked."),
                "site": SiteOutputSerializer(),
            },
        )
    )
    def post(self, request: Request, pk: int) -> Response:
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        result = site_check(site=site_get(pk), actor=actor_of(request), force=data.validated_data["force"])
        return Response(_check_dict(result))
