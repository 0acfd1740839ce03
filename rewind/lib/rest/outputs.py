"""What goes out: one pydantic model per entity (its part's ``presenters``), which the MCP tools answer
with, the REST views send as ``rest_body`` (times in UTC as ``…Z``) and ``rewind.lib.rest.schema`` hands
to drf-spectacular's pydantic extension for the OpenAPI schema."""

from __future__ import annotations

from typing import Any, ClassVar, Self

from django.db import models
from drf_spectacular.plumbing import build_choice_field
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, WithJsonSchema
from rest_framework import serializers

URL = WithJsonSchema({"type": "string", "format": "uri"}, mode="serialization")
MCP_ONLY = WithJsonSchema(None, mode="serialization")  # not in the REST schema: never in a REST body
# A related manager (``guard.vpgs``) read as the list of its rows.
ROWS = BeforeValidator(lambda value: value.all() if isinstance(value, models.Manager) else value)


def set_when_it_applies(schema: dict[str, Any]) -> None:
    """The mark of an ``optional`` key, which ``rewind.lib.rest.schema`` reads; it changes no JSON schema."""


def optional(**kwargs: Any) -> Any:
    """A key set only when it applies: a REST body leaves it out otherwise (its schema: not required,
    never null); an MCP answer has it as null."""
    return Field(default=None, json_schema_extra=set_when_it_applies, **kwargs)


def rest_body(out: BaseModel) -> Any:
    """``out`` as JSON, less the ``optional`` keys it did not set (a model is built with every other key)."""
    return out.model_dump(mode="json", exclude_unset=True)


def choices(options: Any, *, blank: bool = False) -> WithJsonSchema:
    """A string among ``options``: an enum in the REST schema, described and named (``ENUM_NAME_OVERRIDES``)
    as DRF's ``ChoiceField`` would be; the choices' text follows the field's own description."""
    schema = build_choice_field(serializers.ChoiceField(choices=options, allow_blank=blank))
    schema["x-choices"] = schema.pop("description")
    return WithJsonSchema(schema, mode="serialization")


# Every output model by its class name, as pydantic names a nested model's definition.
OUTPUT_MODELS: dict[str, type[BaseModel]] = {}


class OutputModel(BaseModel):
    # Validated from rows by attribute; every key is in the REST schema's required list but ``optional`` ones.
    model_config = ConfigDict(from_attributes=True, json_schema_serialization_defaults_required=True)

    rest_name: ClassVar[str | None] = None  # its component in the schema, else the class name less "Out"
    presents: ClassVar[type[models.Model] | None] = None  # the row whose help texts and choices document it

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        if OUTPUT_MODELS.setdefault(cls.__name__, cls) is not cls:
            raise TypeError(f"two output models are named {cls.__name__}: the schema could not tell them apart")

    @classmethod
    def of(cls, row: object, **more: Any) -> Self:
        """``row`` as this model, read by attribute but for the keys ``more`` gives."""
        return cls.model_validate(_RowWith(row, more))


class _RowWith:
    def __init__(self, row: object, more: dict[str, Any]) -> None:
        self.row, self.more = row, more

    def __getattr__(self, name: str) -> Any:
        return self.more[name] if name in self.more else getattr(self.row, name)
