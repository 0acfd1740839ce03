"""pytest plugin: no secret the suite used reaches a log, an audit row, the database, an error or an HTTP answer.

The secrets: the simulated ZVMs' password (``zvmsim.auth.PASSWORD``) and every token they issue
(each carries ``zvmsim.auth.TOKEN_MARK``, so one is found without knowing it), every agent token
issued (``agent_token_issue``), everything stored encrypted (``rewind.lib.crypto.encrypt``: ZVM
passwords and client secrets, upstream MCP servers' headers and environment values, the shared ZVM
tokens) and every Apprise URL and its secret parts (``configured_secrets``).

Where they are looked for, in this process, as the suite runs:
- every log record any logger emits;
- every value written to the database (the parameters of INSERT and UPDATE, also inside a WITH;
  an encrypted column holds ciphertext, which must not hold the plaintext either);
- every answer of Django (the test client, the live server) and every HTTP answer a test reads
  with httpx2 (uvicorn, the gateway's upstreams), but the simulator's own (its token endpoint
  hands tokens out) and an answer that shows a token issued while making it (shown once, by design);
and, for what other processes (uvicorn, Celery workers) wrote, every table of ours before a
transactional test's flush and once more at the end, and at the end every log file under the
session's temporary folder and REWIND_VAR_DIR. At the end of the session a hit fails the run (an
error at the teardown of the last test), naming where it was and what kind of secret, never the
secret; the counts are printed.
"""

from __future__ import annotations

import functools
import json
import re
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

MIN_SECRET = 8  # shorter strings are not distinctive enough to search for
# A statement that writes rows: INSERT or UPDATE, also inside a WITH (on PostgreSQL every audit append
# is ``WITH ins AS (INSERT ...)``, which a look at the first word alone never scanned).
_WRITE = re.compile(r"\s*(?:WITH\b.*?\b)?(?:INSERT|UPDATE)\b", re.IGNORECASE | re.DOTALL)
_lock = threading.Lock()


class Registry:
    def __init__(self) -> None:
        self.secrets: dict[str, str] = {}  # secret -> its kind
        self.version = 0
        self._pattern: tuple[int, re.Pattern[str]] | None = None
        self.hits: list[str] = []
        self.scanned: Counter[str] = Counter()
        self.allowed = threading.local()  # tokens an answer being made may show
        self.test = ""  # the test running (its node id): a hit names it, so a leak is found where it began

    def add(self, kind: str, value: Any) -> None:
        if isinstance(value, str) and len(value) >= MIN_SECRET and value not in self.secrets:
            with _lock:
                self.secrets[value] = kind
                self.version += 1

    def pattern(self) -> re.Pattern[str]:
        from zvmsim.auth import TOKEN_MARK

        cached = self._pattern
        if cached is not None and cached[0] == self.version:
            return cached[1]
        alternatives = [re.escape(s) for s in sorted(self.secrets, key=len, reverse=True)]
        compiled = re.compile("|".join([re.escape(TOKEN_MARK) + r"[A-Za-z0-9_-]{8,}", *alternatives]))
        self._pattern = (self.version, compiled)
        return compiled

    def kind(self, found: str) -> str:
        return self.secrets.get(found, "ZVM token")

    def scan(self, sink: str, where: str, text: str, allowed: frozenset[str] = frozenset()) -> None:
        self.scanned[sink] += 1
        for match in self.pattern().finditer(text):
            if match.group(0) in allowed:
                continue
            with _lock:
                self.hits.append(f"{sink}: {where}: {self.kind(match.group(0))}")


registry = Registry()


def _text(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    if isinstance(value, str):
        return value
    # psycopg's Json and Jsonb (what a JSON column is written as on PostgreSQL) hold the value in
    # ``obj``; their repr is reprlib's, which cuts strings at 30 characters and dicts at 4 keys.
    held = getattr(value, "obj", value)
    if isinstance(held, str):
        return held
    if isinstance(held, (dict, list, tuple)):
        return json.dumps(held, default=str, ensure_ascii=False)
    return repr(value)


class _LogSink:
    level = 0

    def handle(self, record: Any) -> None:
        try:
            text = record.getMessage()
        except Exception:  # a record whose arguments do not format: its parts still count
            text = f"{record.msg!r} {record.args!r}"
        if record.exc_info and record.exc_info[1] is not None:
            text += f" {record.exc_info[1]!r}"
        registry.scan("log", record.name, text)


def _wrap(owner: Any, name: str, make: Callable[[Callable[..., Any]], Callable[..., Any]]) -> Callable[[], None]:
    """Wrap ``owner.name``, and every reference to it that a loaded module of ours holds (``from x import f``)."""
    import sys

    original = getattr(owner, name)
    wrapped = functools.wraps(original)(make(original))
    holders = [owner] + [
        m
        for key, m in list(sys.modules.items())
        if key.split(".")[0] in ("rewind", "catalog", "recoveries", "tests") and getattr(m, name, None) is original
    ]
    for holder in holders:
        setattr(holder, name, wrapped)

    def restore() -> None:
        for holder in holders:
            setattr(holder, name, original)

    return restore


def _sources() -> list[Callable[[], None]]:
    """Record each secret where the suite makes or configures it."""
    import rewind.urls  # noqa: F401  (every module that names the services below is loaded: all are wrapped)
    from rewind.agents import services as agents
    from rewind.lib import crypto
    from rewind.notifications import channels

    def issue(original: Callable[..., Any]) -> Callable[..., Any]:
        def issued(*args: Any, **kwargs: Any) -> Any:
            result = original(*args, **kwargs)
            registry.add("agent token", result.token)
            shown = getattr(registry.allowed, "tokens", None)
            if shown is not None:
                shown.add(result.token)
            return result

        return issued

    def encrypt(original: Callable[..., Any]) -> Callable[..., Any]:
        # Whatever is stored encrypted is a secret: ZVM passwords and client secrets, upstream
        # headers and environment values, the ZVM tokens the processes share.
        def encrypted(plaintext: str) -> Any:
            registry.add("secret stored encrypted (ZVM password or token, upstream header)", plaintext)
            return original(plaintext)

        return encrypted

    def apprise(original: Callable[..., Any]) -> Callable[..., Any]:
        def secrets_of() -> Any:
            for url in channels.configured_urls():
                registry.add("Apprise URL", url)
            found = original()
            for part in found:
                registry.add("Apprise URL secret", part)
            return found

        return secrets_of

    return [
        _wrap(agents, "agent_token_issue", issue),
        _wrap(crypto, "encrypt", encrypt),
        _wrap(channels, "configured_secrets", apprise),
    ]


def _sinks() -> list[Callable[[], None]]:
    """Look at what this process logs, writes to the database and answers over HTTP."""
    import httpx2
    from django.core.handlers.base import BaseHandler
    from django.db.backends.utils import CursorWrapper

    def execute(original: Callable[..., Any]) -> Callable[..., Any]:
        def run(self: Any, sql: str, params: Any = None, *args: Any, **kwargs: Any) -> Any:
            if params and _WRITE.match(sql):
                rows = params if original.__name__ == "executemany" else [params]
                for row in rows:
                    values = row.values() if isinstance(row, dict) else row
                    registry.scan("database write", sql[:60], " ".join(_text(v) for v in values if v is not None))
            return original(self, sql, params, *args, **kwargs)

        return run

    def get_response(original: Callable[..., Any]) -> Callable[..., Any]:
        def answered(self: Any, request: Any) -> Any:
            shown: set[str] = set()
            registry.allowed.tokens = shown
            try:
                response = original(self, request)
            finally:
                registry.allowed.tokens = None
            if not getattr(response, "streaming", False):
                registry.scan(
                    "HTTP answer", f"{request.method} {request.path}", _text(response.content), frozenset(shown)
                )
            return response

        return answered

    def send(original: Callable[..., Any], asynchronous: bool) -> Callable[..., Any]:
        def seen(response: Any) -> None:
            path = response.request.url.path
            if path.startswith(("/v1/", "/auth/", "/_sim/")) or "/auth/realms/" in path:
                return  # the simulator: its token endpoint hands tokens out
            if response.headers.get("content-type", "").startswith(("application/json", "text/")):
                try:
                    registry.scan("HTTP answer", f"{response.request.method} {path}", response.text)
                except Exception:  # a streamed body not read by the test: nothing was shown
                    pass

        if asynchronous:

            async def async_send(self: Any, request: Any, *args: Any, **kwargs: Any) -> Any:
                response = await original(self, request, *args, **kwargs)
                if not kwargs.get("stream"):
                    seen(response)
                return response

            return async_send

        def sync_send(self: Any, request: Any, *args: Any, **kwargs: Any) -> Any:
            response = original(self, request, *args, **kwargs)
            if not kwargs.get("stream"):
                seen(response)
            return response

        return sync_send

    import logging

    sink = _LogSink()
    logging.getLogger().addHandler(sink)  # type: ignore[arg-type]
    return [
        _wrap(CursorWrapper, "execute", execute),
        _wrap(CursorWrapper, "executemany", execute),
        _wrap(BaseHandler, "get_response", get_response),
        _wrap(httpx2.Client, "send", lambda o: send(o, False)),
        _wrap(httpx2.AsyncClient, "send", lambda o: send(o, True)),
        lambda: logging.getLogger().removeHandler(sink),  # type: ignore[arg-type]
    ]


def scan_tables(where: str) -> None:
    """Every row of our tables (what other processes wrote too), but encrypted columns and hashes.

    A hit names the row (its id, and its action where it has one), never what it holds.
    """
    from django.apps import apps

    for model in apps.get_models():
        if model._meta.app_label not in ("rewind", "catalog", "recoveries"):
            continue
        fields = [
            f.attname
            for f in model._meta.concrete_fields
            if not f.attname.endswith("_encrypted") and f.attname != "token_hash"
        ]
        named = ["pk", *(["action"] if "action" in fields else [])]
        for row in model._default_manager.values_list(*named, *fields):
            label = " ".join(f"{name} {value}" for name, value in zip(named, row, strict=False))
            registry.scan(
                "database row",
                f"{model._meta.db_table} {label} ({where})",
                " ".join(_text(v) for v in row[len(named) :]),
            )


def _scan_files(roots: list[Path]) -> None:
    for root in roots:
        for path in root.rglob("*.log"):
            if path.is_file():
                registry.scan("log file", str(path), path.read_text(errors="replace"))


@pytest.fixture(scope="session", autouse=True)
def _secrets_never_leak(
    tmp_path_factory: pytest.TempPathFactory, django_db_setup: None, django_db_blocker: Any
) -> Iterator[None]:
    from django.conf import settings
    from django.test import TransactionTestCase

    from zvmsim.auth import PASSWORD

    registry.add("ZVM password", PASSWORD)
    undo = [*_sources(), *_sinks()]
    original_teardown = TransactionTestCase._fixture_teardown  # type: ignore[attr-defined]

    flushed: list[str] = []

    def teardown(self: Any) -> None:
        scan_tables(f"before the flush after {registry.test or type(self).__name__}")  # what every process wrote
        original_teardown(self)
        flushed.append(registry.test)

    TransactionTestCase._fixture_teardown = teardown  # type: ignore[attr-defined]
    yield
    TransactionTestCase._fixture_teardown = original_teardown  # type: ignore[attr-defined]
    if flushed:  # what other processes committed after the last flush (without one, no process wrote)
        with django_db_blocker.unblock():
            scan_tables(f"at the end, after {registry.test}")
    for restore in undo:
        restore()
    _scan_files([tmp_path_factory.getbasetemp(), Path(settings.VAR_DIR)])
    kinds = Counter(registry.secrets.values())
    print(
        f"\nsecret scan: {len(registry.secrets)} secrets ({dict(kinds)} and every simulated ZVM token) looked for "
        f"in {dict(registry.scanned)}: {len(registry.hits)} hits"
    )
    if registry.hits:
        pytest.fail("secrets leaked:\n" + "\n".join(sorted(set(registry.hits))[:50]), pytrace=False)


def pytest_runtest_setup(item: pytest.Item) -> None:
    registry.test = item.nodeid
