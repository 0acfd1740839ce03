"""Rows written and read in plain SQL, with statements built once per process.

On the hot paths (a poll round, a call's own rows) building the ORM's query (``bulk_update``'s ``CASE WHEN``
tree, a compiler, its converters) cost more CPU than running it; measured: see the benchmarks page. The values
are still prepared and converted by the fields themselves, as the ORM would.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence, Sized
from functools import cache
from typing import Any, TypeVar

from django.db import connection, models

M = TypeVar("M", bound=models.Model)


def update_rows(objs: Sequence[models.Model], fields: Sequence[str]) -> None:
    """``UPDATE … SET <fields> WHERE pk = …`` for each of ``objs``, with the values they hold in memory.

    No compare-and-swap of its own: callers lock or check the rows first, in the same transaction.
    """
    if not objs:
        return
    model = type(objs[0])
    sql = _statement(connection.vendor, model, tuple(fields))
    concrete = [_field(model, name) for name in fields]
    pk = model._meta.pk
    assert pk is not None
    params = [
        [f.get_db_prep_save(getattr(obj, f.attname), connection) for f in concrete]
        + [pk.get_db_prep_value(obj.pk, connection)]
        for obj in objs
    ]
    with connection.cursor() as cursor:
        cursor.executemany(sql, params)


@cache
def _statement(vendor: str, model: type[models.Model], fields: tuple[str, ...]) -> str:
    quote = connection.ops.quote_name
    opts = model._meta
    assert opts.pk is not None
    columns = ", ".join(f"{quote(str(_field(model, name).column))} = %s" for name in fields)
    return f"UPDATE {quote(opts.db_table)} SET {columns} WHERE {quote(str(opts.pk.column))} = %s"


def column(model: type[models.Model], name: str) -> str:
    """The quoted column of ``model.name``, for plain SQL built once (see ``update_rows``)."""
    return connection.ops.quote_name(str(_field(model, name).column))


def marks(values: Sized) -> str:
    """One ``%s`` per value, comma separated: the placeholders of an ``IN (…)`` in plain SQL."""
    return ", ".join(["%s"] * len(values))


def column_of(model: type[models.Model], alias: str) -> Callable[[str], str]:
    """``name -> alias."column"`` of ``model``'s fields, for plain SQL that joins tables."""
    return lambda name: f"{alias}.{column(model, name)}"


def _field(model: type[models.Model], name: str) -> models.Field[Any, Any]:
    field = model._meta.get_field(name)
    if not isinstance(field, models.Field) or field.column is None:
        raise ValueError(f"{model.__name__}.{name} is not a column")
    return field


# -- one row, read or written in plain SQL -----------------------------------------------------


@cache
def table(model: type[models.Model]) -> str:
    """The model's table name, quoted for SQL."""
    return connection.ops.quote_name(model._meta.db_table)


@cache
def columns(model: type[models.Model], alias: str = "") -> str:
    """Every concrete column of the model in field order (what ``model_from_row`` takes), comma separated;
    ``alias`` prefixes each (for joins)."""
    quote = connection.ops.quote_name
    prefix = f"{alias}." if alias else ""
    return ", ".join(prefix + quote(str(f.column)) for f in model._meta.concrete_fields)


def column_count(model: type[models.Model]) -> int:
    return len(model._meta.concrete_fields)


@functools.lru_cache(maxsize=256)
def _converters(ops: Any, model: type[models.Model]) -> tuple[tuple[Any, tuple[Any, ...]], ...]:
    # Per connection (its ``ops``): what the SQL compiler would apply to each column it reads.
    out = []
    for field in model._meta.concrete_fields:
        col = field.get_col(model._meta.db_table)
        out.append((col, tuple(ops.get_db_converters(col) + col.get_db_converters(ops.connection))))
    return tuple(out)


def model_from_row(model: type[M], row: Sequence[Any]) -> M:
    """An instance of ``model`` from the values ``SELECT columns(model)`` read, converted as the ORM would."""
    values = []
    for value, (col, converters) in zip(row, _converters(connection.ops, model), strict=True):
        for converter in converters:
            value = converter(value, col, connection)
        values.append(value)
    return model.from_db(connection.alias, _attnames(model), values)


def value_from_db(model: type[models.Model], name: str, value: Any) -> Any:
    """A value of column ``model.name`` read in plain SQL (an aggregate of it, say), converted as the ORM would."""
    field = _field(model, name)
    col, converters = _converters(connection.ops, model)[model._meta.concrete_fields.index(field)]
    for converter in converters:
        value = converter(value, col, connection)
    return value


def row_by_pk(model: type[M], pk: Any) -> M | None:
    """``model.objects.filter(pk=pk).first()`` in one statement built once per model."""
    with connection.cursor() as cursor:
        cursor.execute(_by_pk(model), [pk])
        row = cursor.fetchone()
    return None if row is None else model_from_row(model, row)


@cache
def _by_pk(model: type[models.Model]) -> str:
    pk = model._meta.pk
    assert pk is not None
    return f"SELECT {columns(model)} FROM {table(model)} WHERE {connection.ops.quote_name(str(pk.column))} = %s"


@cache
def _attnames(model: type[models.Model]) -> tuple[str, ...]:
    return tuple(f.attname for f in model._meta.concrete_fields)


@functools.lru_cache(maxsize=64)
def _insert(ops: Any, model: type[models.Model]) -> tuple[str, tuple[models.Field[Any, Any], ...], bool]:
    quote = connection.ops.quote_name
    pk = model._meta.pk
    assert pk is not None
    fields = tuple(f for f in model._meta.concrete_fields if f is not pk)
    names = ", ".join(quote(str(f.column)) for f in fields)
    placeholders = marks(fields)
    returning = bool(ops.connection.features.can_return_columns_from_insert)
    sql = f"INSERT INTO {table(model)} ({names}) VALUES ({placeholders})"
    if returning:
        sql += f" RETURNING {quote(str(pk.column))}"
    return sql, fields, returning


def insert_row(obj: models.Model) -> None:
    """``obj.save()`` of a new row with a database-made primary key, in one statement built once per model.

    Fills ``auto_now_add``, ``auto_now`` and the primary key; sends no signals. Call inside the caller's transaction.
    """
    sql, fields, returning = _insert(connection.ops, type(obj))
    params = [f.get_db_prep_save(f.pre_save(obj, True), connection) for f in fields]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        pk = cursor.fetchone()[0] if returning else cursor.lastrowid
    obj.pk = pk
    obj._state.adding = False
    obj._state.db = connection.alias
