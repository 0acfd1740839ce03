from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings

from rewind.lib.env import database_from_url


def _start(tmp_path: Path, *check: str, **env: str) -> subprocess.CompletedProcess[str]:
    """Start Django in a fresh process with only the given variables set (``manage.py check`` + ``check``)."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "REWIND_", "MCP_", "ZVM_", "CELERY_"))}
    clean.pop("DATABASE_URL", None)
    clean.pop("REDIS_URL", None)
    clean.update({"REWIND_VAR_DIR": str(tmp_path / "var"), "DJANGO_SETTINGS_MODULE": "rewind.settings", **env})
    return subprocess.run(
        [sys.executable, "manage.py", "check", *check],
        cwd=settings.BASE_DIR,
        env=clean,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.process
def test_it_starts_with_nothing_set(tmp_path: Path) -> None:
    result = _start(tmp_path)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "var" / "broker" / "queue").is_dir()
    assert (tmp_path / "var" / "encryption.key").stat().st_mode & 0o077 == 0


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("DJANGO_DEBUG", "maybe"),
        ("DATABASE_URL", "mysql://db/x"),
        ("REDIS_URL", "http://localhost:6379"),
        ("ZVM_READ_TIMEOUT_S", "soon"),
        ("REWIND_CHECKPOINT_TIMEOUT_S", "0"),
        ("MCP_RATE_LIMIT_PER_MINUTE", "lots"),
        ("REWIND_LOG_LEVEL", "LOUD"),
        ("DJANGO_SECRET_KEY_FILE", "/nonexistent/secret"),
        ("REWIND_AUDIT_ANCHOR_KEY", "not-a-key"),
        ("MCP_RATE_LIMIT_BURST", "0"),
        ("REWIND_LOGIN_FAILURE_LIMIT", "0"),
    ],
)
@pytest.mark.process
def test_it_refuses_to_start_on_a_malformed_variable(tmp_path: Path, name: str, value: str) -> None:
    result = _start(tmp_path, **{name: value})
    assert result.returncode != 0
    assert name in result.stderr
    assert "Traceback" not in result.stderr.splitlines()[-1]


@pytest.mark.process
def test_it_refuses_a_secret_given_twice(tmp_path: Path) -> None:
    secret_file = tmp_path / "key"
    secret_file.write_text("from-file")
    result = _start(tmp_path, DJANGO_SECRET_KEY="direct", DJANGO_SECRET_KEY_FILE=str(secret_file))
    assert result.returncode != 0
    assert "DJANGO_SECRET_KEY" in result.stderr
    assert "from-file" not in result.stderr
    assert "direct" not in result.stderr.split("DJANGO_SECRET_KEY")[0]


@pytest.mark.process
def test_it_reads_secrets_from_files(tmp_path: Path) -> None:
    key_file = tmp_path / "enc"
    key_file.write_text("not-a-fernet-key")
    # A readable file with a bad key is reported when the key is first used, naming it.
    result = subprocess.run(
        [sys.executable, "-c", "import django; django.setup(); from rewind.lib.crypto import encrypt; encrypt('x')"],
        cwd=settings.BASE_DIR,
        env={
            **os.environ,
            "REWIND_VAR_DIR": str(tmp_path / "var"),
            "DJANGO_SETTINGS_MODULE": "rewind.settings",
            "REWIND_ENCRYPTION_KEY_FILE": str(key_file),
        },
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0
    assert "REWIND_ENCRYPTION_KEY" in result.stderr
    assert "not-a-fernet-key" not in result.stderr


def test_database_urls(tmp_path: Path) -> None:
    pg = database_from_url("DATABASE_URL", "postgres://u:p%40ss@db.example:5433/rewind", var_dir=tmp_path)
    assert (pg["NAME"], pg["USER"], pg["PASSWORD"], pg["HOST"], pg["PORT"]) == (
        "rewind",
        "u",
        "p@ss",
        "db.example",
        "5433",
    )
    absolute = database_from_url("DATABASE_URL", "sqlite:////data/rewind.sqlite3", var_dir=tmp_path)
    assert str(absolute["NAME"]) == "/data/rewind.sqlite3"
    relative = database_from_url("DATABASE_URL", "sqlite:///rewind.sqlite3", var_dir=tmp_path)
    assert relative["NAME"] == tmp_path / "rewind.sqlite3"


# The production settings docs/deployment.md gives ("The web front over TLS"): served over TLS at a name of
# its own, and the audit anchors' key and file away from the database (docs/audit-integrity.md).
PRODUCTION = {"DJANGO_ALLOWED_HOSTS": "rewind.example.com", "REWIND_PUBLIC_URL": "https://rewind.example.com"}


def _production(tmp_path: Path) -> dict[str, str]:
    from rewind.lib.crypto import new_signing_key

    key = tmp_path / "elsewhere" / "audit-anchor.key"
    key.parent.mkdir()
    key.write_text(new_signing_key())
    anchors = tmp_path / "elsewhere" / "audit-anchors.jsonl"
    return {**PRODUCTION, "REWIND_AUDIT_ANCHOR_KEY_FILE": str(key), "REWIND_AUDIT_ANCHOR_FILE": str(anchors)}


@pytest.mark.process
def test_the_deploy_check_is_clean_under_the_documented_production_settings(tmp_path: Path) -> None:
    result = _start(tmp_path, "--deploy", "--fail-level", "WARNING", **_production(tmp_path))
    assert result.returncode == 0, result.stderr + result.stdout
    assert "System check identified no issues" in result.stdout
    # Served over plain HTTP, the key and the anchors beside the database: the same check names each.
    plain = _start(tmp_path, "--deploy", "--fail-level", "WARNING", DJANGO_ALLOWED_HOSTS="rewind.example.com")
    assert plain.returncode != 0
    said = plain.stderr + plain.stdout
    assert "security.W004" in said  # no HSTS
    assert "rewind.W001" in said  # the anchors' key beside the database
    assert "rewind.W002" in said  # the anchors' file beside the database


@pytest.mark.process
def test_over_tls_cookies_are_secure_and_hsts_is_sent(tmp_path: Path) -> None:
    script = (
        "import django, json; django.setup(); from django.conf import settings as s; from django.test import Client; "
        "c = Client(HTTP_HOST='rewind.example.com'); r = c.get('/health/', secure=True); "
        "print(json.dumps({'session': s.SESSION_COOKIE_SECURE, 'csrf': s.CSRF_COOKIE_SECURE, "
        "'redirect': s.SECURE_SSL_REDIRECT, 'hsts': r.get('Strict-Transport-Security'), "
        "'plain': c.get('/health/').status_code, 'ok': r.status_code}))"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "REWIND_", "DATABASE_URL"))}
    env.update(REWIND_VAR_DIR=str(tmp_path / "var"), DJANGO_SETTINGS_MODULE="rewind.settings", **PRODUCTION)
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=settings.BASE_DIR, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen == {
        "session": True,
        "csrf": True,
        "redirect": True,
        "hsts": "max-age=31536000; includeSubDomains",
        "plain": 301,  # plain HTTP is sent to https://
        "ok": 200,
    }
