"""How the REST API describes itself in its OpenAPI schema (drf-spectacular).

Every view is an ``APIView`` with nested ``InputSerializer`` and ``FilterSerializer`` classes that
names its output models (``rewind.lib.rest.outputs``) in ``extend_schema``. The schema class reads those
conventions and adds what every operation shares, so no view repeats it: its filters and body, a
page of its model for a paginated ``GET``, its errors and who may call it (``describe_permission``).
"""

from __future__ import annotations

from typing import Any

from django.db import models
from drf_spectacular.contrib.pydantic import PydanticExtension
from drf_spectacular.openapi import AutoSchema
from drf_spectacular.plumbing import ResolvedComponent
from drf_spectacular.utils import OpenApiResponse
from pydantic import BaseModel
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue, model_json_schema
from pydantic_core import core_schema
from rest_framework import serializers
from rest_framework.authentication import BaseAuthentication
from rest_framework.pagination import CursorPagination

from rewind.lib.rest.outputs import OUTPUT_MODELS, choices, set_when_it_applies

UNSAFE = ("POST", "PUT", "PATCH", "DELETE")


class ErrorSerializer(serializers.Serializer):
    """The body of every error but invalid input."""

    detail = serializers.CharField(help_text="What went wrong, in plain words.")


# Invalid input: one list of messages per field (``non_field_errors`` for the whole body); a list or
# an object field's messages are keyed by the bad item's index or key; a body that is not JSON at
# all gets ``detail`` instead.
_FIELD_MESSAGES: dict[str, Any] = {
    "oneOf": [
        {"type": "array", "items": {"type": "string"}},
        {"type": "object", "additionalProperties": {"type": "array", "items": {"type": "string"}}},
    ]
}
VALIDATION_ERROR_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"detail": {"type": "string"}},
    "additionalProperties": _FIELD_MESSAGES,
    "example": {"vm_arg": ["name the tool argument that holds the VM (e.g. host)"]},
}

ERRORS: dict[str, OpenApiResponse] = {
    "400": OpenApiResponse(VALIDATION_ERROR_SCHEMA, description="Invalid input; nothing was changed."),
    "401": OpenApiResponse(ErrorSerializer, description="The bearer token is missing, unknown, revoked or expired."),
    "403": OpenApiResponse(
        ErrorSerializer,
        description="Not signed in, not staff, lacking the permission named above, or a change without its CSRF token.",
    ),
    "404": OpenApiResponse(ErrorSerializer, description="No such object (or an unknown pagination cursor)."),
    "409": OpenApiResponse(
        ErrorSerializer,
        description="The request cannot be carried out as asked (e.g. a recovery no longer pending); "
        "nothing was changed. More keys may say why.",
    ),
}


def describe_permission(view: Any, method: str) -> str | None:
    """Who may make this call, from the view's own text or its permission classes."""
    text = getattr(view, "permission_description", None)
    if text:
        return str(text)
    parts = [p.describe(view, method) for p in view.get_permissions() if hasattr(p, "describe")]
    return " ".join(p for p in parts if p) or None


def component_name(model: type[BaseModel]) -> str:
    return vars(model).get("rest_name") or model.__name__.removesuffix("Out")


class RestJsonSchema(GenerateJsonSchema):
    """An output model's schema as this API's OpenAPI 3.0 writes it: ``nullable`` (3.0 has no null
    type), no pydantic titles, an ``optional`` key not required and never null, and what the row it
    presents says of a field (help text, choices)."""

    def nullable_schema(self, schema: core_schema.NullableSchema) -> JsonSchemaValue:
        inner = self.generate_inner(schema["schema"])
        return {"allOf": [inner], "nullable": True} if "$ref" in inner else {**inner, "nullable": True}

    def normalize_name(self, name: str) -> str:
        # pydantic names a nested model's definition after its class; the component is named as before.
        model = OUTPUT_MODELS.get(name)
        return component_name(model) if model else super().normalize_name(name)

    def field_title_should_be_set(self, schema: Any) -> bool:
        return False

    def model_schema(self, schema: core_schema.ModelSchema) -> JsonSchemaValue:
        json_schema, model = super().model_schema(schema), schema["cls"]
        json_schema.pop("title", None)
        rows = getattr(model, "presents", None)
        fields = {f.name: f for f in rows._meta.get_fields() if isinstance(f, models.Field)} if rows else {}
        for name, prop in json_schema.get("properties", {}).items():
            prop.pop("default", None)  # every key of a body is there (optional ones when they apply)
            info = model.model_fields.get(name)
            if info is not None and info.json_schema_extra is set_when_it_applies:
                prop.pop("nullable", None)
                json_schema["required"].remove(name)
            _document(prop, fields.get(name))
        return json_schema


def _document(prop: JsonSchemaValue, field: models.Field[Any, Any] | None) -> None:
    if field is not None and field.help_text:
        prop.setdefault("description", str(field.help_text))
    if field is not None and field.choices and "enum" not in prop:
        prop.update(choices(field.choices, blank=field.blank).json_schema or {})
    if "x-choices" in prop:  # DRF's way: the field's text, then its choices'
        prop["description"] = "\n\n".join(filter(None, [prop.get("description"), prop.pop("x-choices")]))


class OutputModelExtension(PydanticExtension):
    """drf-spectacular's pydantic extension, with the schema above and the components named as before."""

    priority = 1

    def get_name(self, auto_schema: AutoSchema, direction: str) -> str:
        return component_name(self.target)

    def map_serializer(self, auto_schema: AutoSchema, direction: str) -> JsonSchemaValue:
        ref = "#/components/schemas/{model}"
        schema = model_json_schema(self.target, ref_template=ref, schema_generator=RestJsonSchema, mode="serialization")
        named = {component_name(m): m for m in OUTPUT_MODELS.values()}
        for name, definition in schema.pop("$defs", {}).items():
            auto_schema.registry.register_on_missing(
                ResolvedComponent(name, ResolvedComponent.SCHEMA, definition, named[name])
            )
        return schema


class RewindAutoSchema(AutoSchema):
    def get_serializer_name(self, serializer: Any, direction: Any) -> str:
        # Nested serializers share names (every view has its InputSerializer): prefix the view's.
        # "AgentListApi.InputSerializer" -> "AgentListInput"; "SiteOutputSerializer" -> "Site".
        outer, _, inner = type(serializer).__qualname__.rpartition(".")
        name = inner.removesuffix("Serializer")
        if outer and "<" not in outer:
            name = outer.rpartition(".")[2].removesuffix("Api") + name
        return name.removesuffix("Output") or super().get_serializer_name(serializer, direction)

    def _is_list_view(self, serializer: Any = None) -> bool:
        if self.method == "GET" and getattr(self.view, "pagination_class", None) is not None:
            return True
        return super()._is_list_view(serializer)

    def get_override_parameters(self) -> list[Any]:
        filters = getattr(self.view, "FilterSerializer", None)
        if self.method == "GET" and filters is not None:
            return [*super().get_override_parameters(), filters]
        return super().get_override_parameters()

    def get_request_serializer(self) -> Any:
        # Not the base class's guess: an APIView has no serializer_class, and a POST that
        # takes no body (approve, disable, check) must say so rather than warn.
        if self.method in UNSAFE:
            return getattr(self.view, "InputSerializer", None)
        return None

    def get_operation(self, *args: Any, **kwargs: Any) -> dict[str, Any] | None:
        operation = super().get_operation(*args, **kwargs)
        if operation is None:
            return None
        permission = describe_permission(self.view, self.method)
        if permission:
            text = operation.get("description", "")
            operation["description"] = f"{text}\n\n**Permission:** {permission}".strip()
        responses = operation["responses"]
        for code in self._error_codes(operation):
            if code not in responses:
                responses[code] = self._get_response_for_code(ERRORS[code], code)
        return operation

    def _error_codes(self, operation: dict[str, Any]) -> list[str]:
        codes = ["403"]
        if "requestBody" in operation or (self.method == "GET" and hasattr(self.view, "FilterSerializer")):
            codes.append("400")
        authenticators = self.view.get_authenticators()
        if authenticators and _answers_401(authenticators[0]):
            codes.append("401")
        paginator = self._get_paginator()
        if "{" in self.path or (isinstance(paginator, CursorPagination) and self._is_list_view()):
            codes.append("404")
        if self.method in UNSAFE:
            codes.append("409")
        return sorted(codes)


def _answers_401(authenticator: BaseAuthentication) -> bool:
    """DRF answers 401 (not 403) to a caller without credentials when the view's first
    authenticator names a WWW-Authenticate challenge; session authentication does not."""
    return type(authenticator).authenticate_header is not BaseAuthentication.authenticate_header
