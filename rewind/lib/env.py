"""Strict readers for environment-driven settings.

Every reader fails start-up with ``ImproperlyConfigured`` naming the variable, so a typo in a deployment never
turns into a silently different configuration.
"""

from __future__ import annotations

import ipaddress
import math
import os
from pathlib import Path
from urllib.parse import unquote, urlsplit

from django.core.exceptions import ImproperlyConfigured

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def _raw(name: str) -> str | None:
    value = os.environ.get(name)
    if value is None or value.strip() == "":
        return None
    return value.strip()


def env_str(name: str, default: str | None = None) -> str | None:
    return _raw(name) or default


def env_bool(name: str, default: bool) -> bool:
    raw = _raw(name)
    if raw is None:
        return default
    if raw.lower() in _TRUE:
        return True
    if raw.lower() in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name} must be true or false, got {raw!r}")


def env_int(name: str, default: int, *, minimum: int | None = None) -> int:
    raw = _raw(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be an integer, got {raw!r}") from None
    if minimum is not None and value < minimum:
        raise ImproperlyConfigured(f"{name} must be at least {minimum}, got {value}")
    return value


def env_float(
    name: str,
    default: float,
    *,
    minimum: float | None = None,
    above: float | None = None,
    maximum: float | None = None,
) -> float:
    """A number; ``minimum``/``maximum`` are inclusive bounds, ``above`` an exclusive one."""
    raw = _raw(name)
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be a number, got {raw!r}") from None
    if not math.isfinite(value):
        raise ImproperlyConfigured(f"{name} must be a finite number, got {raw!r}")
    if minimum is not None and value < minimum:
        raise ImproperlyConfigured(f"{name} must be at least {minimum}, got {value}")
    if above is not None and value <= above:
        raise ImproperlyConfigured(f"{name} must be above {above:g}, got {value:g}")
    if maximum is not None and value > maximum:
        raise ImproperlyConfigured(f"{name} must be at most {maximum:g}, got {value:g}")
    return value


def env_list(name: str, default: list[str]) -> list[str]:
    raw = _raw(name)
    if raw is None:
        return default
    return [item.strip() for item in raw.split(",") if item.strip()]


def env_networks(name: str) -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    """Comma-separated addresses or networks (``10.0.0.0/8``, ``::1``); an address is a network of one."""
    out: list[ipaddress.IPv4Network | ipaddress.IPv6Network] = []
    for item in env_list(name, []):
        try:
            out.append(ipaddress.ip_network(item, strict=False))
        except ValueError:
            raise ImproperlyConfigured(f"{name}: {item!r} is not an IP address or network") from None
    return out


def env_secret(name: str) -> str | None:
    """Read NAME, or the file named by NAME_FILE (Docker/Kubernetes secrets); both set is refused as
    ambiguous. The value itself never appears in an error."""
    direct = _raw(name)
    file_name = _raw(f"{name}_FILE")
    if direct and file_name:
        raise ImproperlyConfigured(f"set {name} or {name}_FILE, not both")
    if file_name:
        try:
            value = Path(file_name).read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise ImproperlyConfigured(f"{name}_FILE: cannot read {file_name} ({exc.strerror})") from None
        if not value:
            raise ImproperlyConfigured(f"{name}_FILE: {file_name} is empty")
        return value
    return direct


def database_from_url(name: str, url: str, *, var_dir: Path) -> dict[str, object]:
    """Translate DATABASE_URL (sqlite:///path or postgres://user:pass@host:port/db)."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme == "sqlite":
        path = unquote(parts.path)
        if not path or path == "/":
            raise ImproperlyConfigured(f"{name}: a sqlite URL needs a file path, e.g. sqlite:////abs/path/db.sqlite3")
        # sqlite:///relative.db has the path "/relative.db"; sqlite:////abs.db has "//abs.db".
        file_path = Path(path[1:])
        if not file_path.is_absolute():
            file_path = var_dir / file_path
        return sqlite_database(file_path, test_path=file_path.with_name(f"test_{file_path.name}"))
    if scheme in ("postgres", "postgresql", "pgsql"):
        db_name = unquote(parts.path.lstrip("/"))
        if not db_name:
            raise ImproperlyConfigured(f"{name}: a postgres URL needs a database name")
        try:
            port = parts.port
        except ValueError:
            raise ImproperlyConfigured(f"{name}: invalid port") from None
        return {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": db_name,
            "USER": unquote(parts.username or ""),
            "PASSWORD": unquote(parts.password or ""),
            "HOST": parts.hostname or "",
            "PORT": str(port or ""),
            "CONN_MAX_AGE": 60,
            "CONN_HEALTH_CHECKS": True,
        }
    raise ImproperlyConfigured(f"{name} must start with sqlite:// or postgres://, got scheme {scheme!r}")


def sqlite_database(path: Path, *, test_path: Path) -> dict[str, object]:
    # IMMEDIATE removes "database is locked" from read-then-write transactions; WAL lets readers run
    # beside the single writer.
    return {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": path,
        "OPTIONS": {
            "transaction_mode": "IMMEDIATE",
            "timeout": 20,
            "init_command": "PRAGMA journal_mode=WAL;PRAGMA synchronous=NORMAL",
        },
        # A file, not :memory:, so a real Celery worker in the tests can share it.
        "TEST": {"NAME": test_path},
    }


def check_redis_url(name: str, url: str) -> str:
    if urlsplit(url).scheme not in ("redis", "rediss", "unix"):
        raise ImproperlyConfigured(f"{name} must start with redis://, rediss:// or unix://")
    return url
