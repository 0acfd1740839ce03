"""The store every process shares (Redis when REDIS_URL is set, else the database), and the one
fall-back for when it does not answer.

The rate limit, the request cap, the circuits, the ZVM tokens and the request counts need only small records
by key and counters. A broken store must not take /mcp or the ZVM calls down with it: ``Fallback`` then uses
the caller's local stand-in for ``RETRY_AFTER_FAILURE_S``, says so once, and tries again. Redis's URL may hold
a password: it is never logged.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import Any, Protocol, TypeVar

import redis
import redis.asyncio as aioredis
from django.db import DatabaseError, IntegrityError, connection, models, transaction
from redis.commands.core import AsyncScript
from redis.exceptions import RedisError, WatchError

RETRY_AFTER_FAILURE_S = 10.0
REDIS_TIMEOUT_S = 0.5
# Connections per event loop: a burst of calls waits for one of these instead of opening one each
# (measured: see the benchmarks page). The wait is bounded apart from REDIS_TIMEOUT_S: a busy loop is not a Redis
# that does not answer.
LOOP_CONNECTIONS = 8
CONNECTION_WAIT_S = 5.0
# What a Redis that does not answer raises: its own errors, or a socket's (OSError).
REDIS_DOWN: tuple[type[BaseException], ...] = (RedisError, OSError)
CHANGE_TRIES = 20

T = TypeVar("T")
Record = dict[str, str]  # a record's fields as text; {} when there is none
RowKey = str | int


class NotShared(Exception):
    """The store keeps no record under this key (a circuit of a site the database does not hold)."""


@dataclass(frozen=True)
class Records:
    """One kind of record: a Redis key per record (a hash, or one JSON value), a row of ``model`` in the database."""

    prefix: str
    model: type[models.Model]
    fields: tuple[str, ...]  # the model's fields the record holds
    key_field: str = "key"
    redis_hash: bool = True
    row_key: Callable[[str], RowKey] = str  # the row's key for a record's; raises NotShared when none can be
    # Reading from the database otherwise than the row alone: SQL selecting ``fields`` and then
    # ``derived`` (read-only fields) of one record, by its row key.
    read_sql: Callable[[], str] | None = None
    derived: tuple[str, ...] = ()


@dataclass(frozen=True)
class Counters:
    """Counts by a tuple of names: one Redis hash (the tuple as a JSON field), rows of ``model`` in the database."""

    redis_key: str
    model: type[models.Model]
    key_fields: tuple[str, ...]
    count_field: str = "count"


# change(record) -> (what to write: None nothing, {} delete, else these fields; the result)
Change = Callable[[Record], tuple[Record | None, T]]


class SharedStore(Protocol):
    where: str  # for the log: "Redis", "the database"
    errors: tuple[type[BaseException], ...]  # what it raises when it does not answer

    def get(self, kind: Records, key: str) -> Record: ...
    def change(self, kind: Records, key: str, change: Change[T], *, ttl_s: float | None = None) -> T:
        """Read the record, write what ``change`` says, as one step for every process; its result."""
        ...

    def put(self, kind: Records, key: str, fields: Record, *, ttl_s: float | None = None) -> None: ...
    def delete(self, kind: Records, key: str) -> None: ...
    def add(self, kind: Counters, counts: Mapping[tuple[str, ...], int]) -> None: ...
    def totals(self, kind: Counters) -> dict[tuple[str, ...], int]: ...
    def in_caller_transaction(self) -> bool:
        """Whether a lock taken now would last until the caller's transaction ends."""
        ...


class Fallback:
    """One concern's use of ``store``: while it does not answer, the local stand-in, for
    ``RETRY_AFTER_FAILURE_S``, said once on the concern's logger as "<what> for 10 s: Redis did
    not answer (ConnectionError)"."""

    def __init__(self, store: SharedStore, what: str, logger: logging.Logger) -> None:
        self.store = store
        self._what = what
        self._logger = logger
        self._down_until = 0.0  # monotonic

    def up(self) -> bool:
        return time.monotonic() >= self._down_until

    def failed(self, exc: BaseException) -> None:
        self._down_until = time.monotonic() + RETRY_AFTER_FAILURE_S
        self._logger.warning(
            "%s for %.0f s: %s did not answer (%s)",
            self._what,
            RETRY_AFTER_FAILURE_S,
            self.store.where,
            type(exc).__name__,
        )

    def call(self, shared: Callable[[], T], local: Callable[[], T]) -> T:
        if not self.up():
            return local()
        try:
            return shared()
        except NotShared:
            return local()
        except self.store.errors as exc:
            self.failed(exc)
            return local()

    async def acall(self, shared: Callable[[], Awaitable[T]], local: Callable[[], T]) -> T:
        if not self.up():
            return local()
        try:
            return await shared()
        except self.store.errors as exc:
            self.failed(exc)
            return local()


# --- Redis -----------------------------------------------------------------------------------
@dataclass
class _LoopClient:
    client: aioredis.Redis
    scripts: dict[str, AsyncScript] = field(default_factory=dict)


class RedisLink:
    """The clients on the Redis at ``url``: ``client`` (blocking, for threads) and ``async_script``
    (scripts on a client of the running event loop)."""

    def __init__(self, url: str) -> None:
        self._url = url
        self.client = redis.Redis.from_url(url, socket_connect_timeout=REDIS_TIMEOUT_S, socket_timeout=REDIS_TIMEOUT_S)
        self._loops: dict[asyncio.AbstractEventLoop, _LoopClient] = {}

    def async_script(self, source: str) -> AsyncScript:
        """``source`` registered on the running event loop's client (one client per loop)."""
        # redis.asyncio connections belong to the event loop that opened them; a closed loop's
        # client is dropped when the next loop comes.
        loop = asyncio.get_running_loop()
        held = self._loops.get(loop)
        if held is None:
            for closed in [other for other in self._loops if other.is_closed()]:
                del self._loops[closed]
            pool = aioredis.BlockingConnectionPool.from_url(
                self._url,
                max_connections=LOOP_CONNECTIONS,
                timeout=CONNECTION_WAIT_S,
                socket_connect_timeout=REDIS_TIMEOUT_S,
                socket_timeout=REDIS_TIMEOUT_S,
            )
            held = self._loops[loop] = _LoopClient(aioredis.Redis(connection_pool=pool))
        script = held.scripts.get(source)
        if script is None:
            script = held.scripts[source] = held.client.register_script(source)
        return script

    def event_loops_held(self) -> int:
        """How many event loops have a client here (closed ones are dropped as new ones come)."""
        return len(self._loops)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _loaded(raw: bytes | str | None) -> Record:
    try:
        data = json.loads(raw) if raw else {}
    except ValueError:
        return {}  # not written by us
    return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}


class RedisStore:
    """Records as hashes (or JSON values) under ``prefix + key``, changed in WATCH/MULTI transactions."""

    where = "Redis"
    errors = REDIS_DOWN

    def __init__(self, url: str) -> None:
        self.link = RedisLink(url)

    def get(self, kind: Records, key: str) -> Record:
        return self._read(self.link.client, kind, kind.prefix + key)

    def change(self, kind: Records, key: str, change: Change[T], *, ttl_s: float | None = None) -> T:
        name = kind.prefix + key
        with self.link.client.pipeline() as pipe:
            for _ in range(CHANGE_TRIES):
                try:
                    pipe.watch(name)
                    new, result = change(self._read(pipe, kind, name))
                    pipe.multi()
                    if new is not None:
                        self._write(pipe, kind, name, new, ttl_s)
                    pipe.execute()
                    return result
                except WatchError:
                    continue
        raise RedisError("a shared record kept changing under us")

    def put(self, kind: Records, key: str, fields: Record, *, ttl_s: float | None = None) -> None:
        self._write(self.link.client, kind, kind.prefix + key, fields, ttl_s)

    def delete(self, kind: Records, key: str) -> None:
        self.link.client.delete(kind.prefix + key)

    def add(self, kind: Counters, counts: Mapping[tuple[str, ...], int]) -> None:
        pipe = self.link.client.pipeline(transaction=False)
        for names, n in counts.items():
            pipe.hincrby(kind.redis_key, json.dumps(list(names)), n)
        pipe.execute()

    def totals(self, kind: Counters) -> dict[tuple[str, ...], int]:
        out: dict[tuple[str, ...], int] = {}
        for raw_field, raw_count in self.link.client.hgetall(kind.redis_key).items():
            try:
                names = tuple(str(name) for name in json.loads(raw_field))
            except (ValueError, TypeError):
                continue  # not written by us
            if len(names) == len(kind.key_fields):
                out[names] = int(raw_count)
        return out

    def in_caller_transaction(self) -> bool:
        return False

    @staticmethod
    def _read(client: Any, kind: Records, name: str) -> Record:
        if kind.redis_hash:
            return {_text(k): _text(v) for k, v in client.hgetall(name).items()}
        return _loaded(client.get(name))

    @staticmethod
    def _write(client: Any, kind: Records, name: str, fields: Record, ttl_s: float | None) -> None:
        """A hash takes the fields given beside its others; a JSON value is replaced whole."""
        px = None if ttl_s is None else max(1, int(ttl_s * 1000))
        if not fields:
            client.delete(name)
        elif kind.redis_hash:
            client.hset(name, mapping=fields)
            if px is not None:
                client.pexpire(name, px)
        else:
            client.set(name, json.dumps(fields), px=px)


# --- the database ----------------------------------------------------------------------------
@dataclass(frozen=True)
class _Sql:
    read: str
    lock: str  # the row, locked until the transaction ends
    key_column: str


@cache
def field_of(model: type[models.Model], name: str) -> models.Field[Any, Any]:
    """The model's concrete field ``name`` (its column, default, conversion)."""
    return next(f for f in model._meta.concrete_fields if f.name == name)


@cache
def column(model: type[models.Model], name: str) -> str:
    """The quoted column of the model's field ``name``, for plain SQL."""
    return connection.ops.quote_name(str(field_of(model, name).column))


def _manager(model: type[models.Model]) -> models.Manager[Any]:
    manager = model._meta.default_manager
    assert manager is not None, model  # every concrete model has one
    return manager


@cache
def _sql(kind: Records) -> _Sql:
    table, key = connection.ops.quote_name(kind.model._meta.db_table), column(kind.model, kind.key_field)
    columns = ", ".join(column(kind.model, name) for name in kind.fields)
    read = f"SELECT {columns} FROM {table} WHERE {key} = %s"
    lock = " FOR UPDATE" if connection.features.has_select_for_update else ""
    return _Sql(read=kind.read_sql() if kind.read_sql else read, lock=read + lock, key_column=key)


def _as_text(value: object) -> str:
    return str(int(value)) if isinstance(value, bool) else str(value)


def _record(names: tuple[str, ...], row: tuple[Any, ...] | None) -> Record:
    return {} if row is None else {name: _as_text(v) for name, v in zip(names, row, strict=True) if v is not None}


@contextlib.contextmanager
def _db_errors() -> Iterator[None]:
    try:
        yield
    except DatabaseError:
        # A broken connection must not poison this thread's next call (a restarted server).
        if not connection.in_atomic_block:
            connection.close_if_unusable_or_obsolete()
        raise


class DbStore:
    """Records as rows of their model, changed under the row's lock (PostgreSQL) or the write lock
    (SQLite, IMMEDIATE); counters as one UPSERT per name."""

    where = "the database"
    errors: tuple[type[BaseException], ...] = (DatabaseError,)

    def get(self, kind: Records, key: str) -> Record:
        with _db_errors(), connection.cursor() as cursor:
            cursor.execute(_sql(kind).read, [kind.row_key(key)])
            return _record(kind.fields + kind.derived, cursor.fetchone())

    def change(self, kind: Records, key: str, change: Change[T], *, ttl_s: float | None = None) -> T:
        row_key, sql = kind.row_key(key), _sql(kind)
        try:
            with _db_errors(), transaction.atomic(), connection.cursor() as cursor:
                cursor.execute(sql.lock, [row_key])
                row = cursor.fetchone()
                if row is None:
                    self._create(kind, row_key)
                    cursor.execute(sql.lock, [row_key])
                    row = cursor.fetchone()
                new, result = change(_record(kind.fields, row))
                if new is not None:
                    self._write(cursor, kind, row_key, new)
        except IntegrityError as exc:  # the row's parent is gone (a circuit of a deleted site)
            raise NotShared(kind.prefix) from exc
        return result

    def put(self, kind: Records, key: str, fields: Record, *, ttl_s: float | None = None) -> None:
        row_key = kind.row_key(key)
        with _db_errors(), connection.cursor() as cursor:
            if not self._write(cursor, kind, row_key, fields):
                self._create(kind, row_key)  # or another process did
                self._write(cursor, kind, row_key, fields)

    def delete(self, kind: Records, key: str) -> None:
        with _db_errors(), connection.cursor() as cursor:
            self._write(cursor, kind, kind.row_key(key), {})

    def add(self, kind: Counters, counts: Mapping[tuple[str, ...], int]) -> None:
        table, count = connection.ops.quote_name(kind.model._meta.db_table), column(kind.model, kind.count_field)
        names = [column(kind.model, name) for name in kind.key_fields]
        sql = (
            f"INSERT INTO {table} ({', '.join(names)}, {count}) VALUES ({', '.join(['%s'] * (len(names) + 1))}) "
            f"ON CONFLICT ({', '.join(names)}) DO UPDATE SET {count} = {table}.{count} + EXCLUDED.{count}"
        )
        with _db_errors(), transaction.atomic(), connection.cursor() as cursor:
            cursor.executemany(sql, [[*key, n] for key, n in sorted(counts.items())])

    def totals(self, kind: Counters) -> dict[tuple[str, ...], int]:
        rows = _manager(kind.model).values_list(*kind.key_fields, kind.count_field)
        return {tuple(row[:-1]): row[-1] for row in rows}

    def in_caller_transaction(self) -> bool:
        return connection.in_atomic_block

    @staticmethod
    def _write(cursor: Any, kind: Records, row_key: RowKey, fields: Record) -> bool:
        """Set ``fields`` (its model's fields only; {}: each back to its default); whether the row was there."""
        written = [field_of(kind.model, name) for name in kind.fields if not fields or name in fields]
        if not written:
            return True
        values = [f.get_default() if not fields else f.to_python(fields[f.name]) for f in written]
        assignments = ", ".join(f"{column(kind.model, f.name)} = %s" for f in written)
        table = connection.ops.quote_name(kind.model._meta.db_table)
        cursor.execute(f"UPDATE {table} SET {assignments} WHERE {_sql(kind).key_column} = %s", [*values, row_key])
        return bool(cursor.rowcount)

    @staticmethod
    def _create(kind: Records, row_key: RowKey) -> bool:
        """Create the record's row with its defaults; False when another process created it first."""
        try:
            with transaction.atomic():  # a savepoint: losing the race to create it is not an error
                _manager(kind.model).create(**{field_of(kind.model, kind.key_field).attname: row_key})
        except IntegrityError:
            return False
        return True
