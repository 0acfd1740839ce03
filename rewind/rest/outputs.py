"""What goes out: one pydantic model per entity, for the MCP tools, the REST bodies and the OpenAPI schema.

A part's ``presenters`` module defines each entity as an ``OutputModel``; the MCP tools answer with
it, the REST views with ``rest_body`` (timestamps in UTC as ``…Z``), and ``rewind.rest.schema``
hands it to drf-spectacular's pydantic extension. A model that presents a Django row is validated
from it (``from_attributes``) and names it (``presents``): its help texts and choices document the schema.
"""

from __future__ import annotations

from typing import Any, ClassVar, Self

from django.db import models
from drf_spectacular.plumbing import build_choice_field
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, GetJsonSchemaHandler, WithJsonSchema
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema
from rest_framework import serializers


def optional(**kwargs: Any) -> Any:
    """A key set only when it applies: the REST body leaves it out otherwise, and the schema says so
    (not required, never null); an MCP answer has it as null."""
    return Field(default=None, json_schema_extra={"x-optional": True}, **kwargs)


def rest_body(out: BaseModel) -> Any:
    """``out`` as a REST body: JSON, less the keys it did not set (only ``optional`` ones are ever unset:
    a model is built from its row or with every key)."""
    return out.model_dump(mode="json", exclude_unset=True)


def choices(options: Any, *, blank: bool = False) -> WithJsonSchema:
    """A string among ``options`` (``SomeChoices.choices``): in the REST schema an enum, named as
    ``ENUM_NAME_OVERRIDES`` says, described as DRF's ``ChoiceField`` would describe it."""
    schema = build_choice_field(serializers.ChoiceField(choices=options, allow_blank=blank))
    schema["x-choices"] = schema.pop("description")  # after the field's own description (OutputModel)
    return WithJsonSchema(schema, mode="serialization")


URL = WithJsonSchema({"type": "string", "format": "uri"}, mode="serialization")
# A related manager (``guard.vpgs``) read as the list of its rows.
ROWS = BeforeValidator(lambda value: value.all() if isinstance(value, models.Manager) else value)


class OutputModel(BaseModel):
    # Over REST every key is there (unless ``optional``), default or not.
    model_config = ConfigDict(from_attributes=True, json_schema_serialization_defaults_required=True)

    rest_name: ClassVar[str | None] = None  # its component in the schema; else the class name less "Out"
    presents: ClassVar[type[models.Model] | None] = None

    @classmethod
    def of(cls, row: object, **more: Any) -> Self:
        """``row`` as this model, ``more`` giving the keys it has no attribute for (a name only a service reads)."""
        return cls.model_validate(_RowWith(row, more))

    @classmethod
    def __get_pydantic_json_schema__(cls, core_schema: CoreSchema, handler: GetJsonSchemaHandler) -> JsonSchemaValue:
        schema = handler(core_schema)
        target, rest = handler.resolve_ref_schema(schema), handler.mode == "serialization"
        fields = (
            {f.name: f for f in cls.presents._meta.get_fields() if isinstance(f, models.Field)} if cls.presents else {}
        )
        for name, prop in target["properties"].items():
            if prop.pop("x-optional", False) and rest:
                prop.pop("nullable", None)
                target["required"].remove(name)  # every key is required but these (the model's config)
            if rest:
                _document(prop, fields.get(name))
        return schema


class _RowWith:
    def __init__(self, row: object, more: dict[str, Any]) -> None:
        self.row, self.more = row, more

    def __getattr__(self, name: str) -> Any:
        return self.more[name] if name in self.more else getattr(self.row, name)


def _document(prop: JsonSchemaValue, field: Any) -> None:
    """What the REST schema says of a field beyond its type: its row's help text and choices."""
    if field is not None and field.help_text:
        prop.setdefault("description", str(field.help_text))
    if field is not None and field.choices and "enum" not in prop:
        prop.update(choices(field.choices, blank=field.blank).json_schema or {})
    if "x-choices" in prop:
        prop["description"] = "\n\n".join(filter(None, [prop.get("description"), prop.pop("x-choices")]))
