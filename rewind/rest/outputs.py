"""Output models as the REST schema reads them: one pydantic model per outside shape, one serializer derived from it.

A part defines what an entity looks like to the outside once, as a pydantic model (its
``presenters`` module); the MCP tools answer with that model, the REST views with its
``model_dump(mode="json")``, and ``output_serializer`` derives the DRF serializer that
drf-spectacular writes into the OpenAPI schema. A field added to the model is in all three.

What the Python type does not say (a string that is a timestamp or a URL, a string limited to
a set of choices, the REST text of a field, a key the body may leave out) a field says with
``Rest(...)`` in its ``Annotated`` metadata, which pydantic keeps and ignores.
"""

from __future__ import annotations

import types
from dataclasses import dataclass
from typing import Any, Union, get_args, get_origin

from drf_spectacular.utils import inline_serializer
from pydantic import BaseModel
from rest_framework import serializers

_PLAIN: dict[type, type[serializers.Field]] = {
    str: serializers.CharField,
    int: serializers.IntegerField,
    float: serializers.FloatField,
    bool: serializers.BooleanField,
}


@dataclass(frozen=True)
class Rest:
    """How one field of an output model reads in the REST schema, beyond its Python type."""

    field: type[serializers.Field] | None = None  # e.g. DateTimeField for an ISO 8601 string
    choices: Any = None  # a ChoiceField's choices (a TextChoices' ``.choices``)
    help_text: str | None = None
    optional: bool = False  # the body may leave the key out (then it is never null); every other key is always there
    omit: bool = False  # not in the REST body at all (an MCP-only key, e.g. a file inline)


def _rest_of(metadata: list[Any]) -> Rest:
    return next((m for m in metadata if isinstance(m, Rest)), Rest())


def _split_optional(annotation: Any) -> tuple[Any, bool]:
    if get_origin(annotation) in (Union, types.UnionType):
        args = [a for a in get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            return args[0], len(args) != len(get_args(annotation))
    return annotation, False


def _field(annotation: Any, rest: Rest) -> serializers.Field:
    inner, nullable = _split_optional(annotation)
    kwargs: dict[str, Any] = {}
    if nullable and not rest.optional:
        kwargs["allow_null"] = True
    if rest.optional:
        kwargs["required"] = False
    if rest.help_text:
        kwargs["help_text"] = rest.help_text
    many = get_origin(inner) is list
    if many:
        (inner,) = get_args(inner)
    if isinstance(inner, type) and issubclass(inner, BaseModel):
        return output_serializer(inner)(many=many, **kwargs)
    if rest.choices is not None:
        return serializers.ChoiceField(choices=rest.choices, **kwargs)
    cls = rest.field or _PLAIN.get(inner)
    if cls is None:
        raise TypeError(f"no REST field for {annotation!r}: give one with Rest(field=...)")
    field = cls(**kwargs)
    return serializers.ListField(child=field) if many else field


_SERIALIZERS: dict[type[BaseModel], type[serializers.Serializer]] = {}


def output_serializer(model: type[BaseModel]) -> type[serializers.Serializer]:
    """The serializer the schema shows for ``model`` (one class per model), named by the model's
    ``rest_name`` class variable when it has one: its component's name in the OpenAPI schema."""
    if model not in _SERIALIZERS:
        rests = {name: (info, _rest_of(info.metadata)) for name, info in model.model_fields.items()}
        fields = {name: _field(info.annotation, rest) for name, (info, rest) in rests.items() if not rest.omit}
        name = getattr(model, "rest_name", model.__name__)
        _SERIALIZERS[model] = inline_serializer(name, fields).__class__
    return _SERIALIZERS[model]
