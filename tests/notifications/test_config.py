"""Notification URLs in the settings: checked with Apprise at start-up, never shown whole."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from rewind.notifications.apprise_urls import MASK, describe, redact
from rewind.notifications.config import notify_urls_setting, site_notify_urls_setting

SECRET = "Pw-start-up-9f3k2"


def _run(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """``manage.py <args>`` in a fresh process with only the given variables set."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "REWIND_", "MCP_", "ZVM_", "CELERY_"))}
    clean.pop("DATABASE_URL", None)
    clean.pop("REDIS_URL", None)
    clean.update({"REWIND_VAR_DIR": str(tmp_path / "var"), "DJANGO_SETTINGS_MODULE": "rewind.settings", **env})
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=settings.BASE_DIR,
        env=clean,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize(
    ("name", "value", "words"),
    [
        (
            "REWIND_NOTIFY_URLS",
            f"json://u:{SECRET}@127.0.0.1:9/ok jsn://hook:{SECRET}@example.com/x",
            ["REWIND_NOTIFY_URLS", "URL 2", "jsn://", "Apprise"],
        ),
        ("REWIND_NOTIFY_URLS", f"tgram://{SECRET}", ["REWIND_NOTIFY_URLS", "URL 1", "tgram://"]),
        ("REWIND_NOTIFY_URLS", f"hooks.example.com/{SECRET}", ["REWIND_NOTIFY_URLS", "not a URL"]),
        (
            "REWIND_NOTIFY_URLS",
            f"json://u:{SECRET}@127.0.0.1:9/a,json://u:{SECRET}@127.0.0.1:9/b",
            ["REWIND_NOTIFY_URLS", "more than one URL", "not commas"],
        ),
        (
            "REWIND_NOTIFY_SITE_URLS",
            f'{{"Site B": ["json://u:{SECRET}@127.0.0.1:9/ok", "mailto://"]}}',
            ["REWIND_NOTIFY_SITE_URLS", "URL 2 of site 'Site B'", "mailto://"],
        ),
        ("REWIND_NOTIFY_SITE_URLS", f'{{"Site B": "json://u:{SECRET}@h/x"', ["REWIND_NOTIFY_SITE_URLS", "JSON object"]),
        ("REWIND_NOTIFY_SITE_URLS", f'["json://u:{SECRET}@h/x"]', ["REWIND_NOTIFY_SITE_URLS", "JSON object"]),
    ],
)
@pytest.mark.process
def test_a_malformed_notification_url_stops_start_up_naming_the_setting(
    tmp_path: Path, name: str, value: str, words: list[str]
) -> None:
    result = _run(tmp_path, "check", **{name: value})
    assert result.returncode != 0
    for word in words:
        assert word in result.stderr, word
    output = result.stdout + result.stderr
    assert SECRET not in output
    assert f"{SECRET[0]}...{SECRET[-1]}" not in output  # Apprise's own "secure" logging shows both ends
    assert "Traceback" not in result.stderr.splitlines()[-1]


@pytest.mark.process
def test_valid_urls_start_from_a_file_and_settings_never_show_them(tmp_path: Path) -> None:
    urls = tmp_path / "urls"
    urls.write_text(f"json://u:{SECRET}@127.0.0.1:9/a\nmailto://mailer:{SECRET}@example.com\n")
    result = _run(
        tmp_path,
        "diffsettings",
        REWIND_NOTIFY_URLS_FILE=str(urls),
        REWIND_NOTIFY_SITE_URLS=f'{{"Site B": "json://hook:{SECRET}@127.0.0.1:9/b"}}',
    )
    assert result.returncode == 0, result.stderr
    assert "REWIND_NOTIFY_URLS = <2 notification URL(s), not shown>" in result.stdout
    assert "REWIND_NOTIFY_SITE_URLS = <notification URLs of site(s) 'Site B', not shown>" in result.stdout
    assert SECRET not in result.stdout + result.stderr


def test_the_settings_readers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REWIND_NOTIFY_URLS", f"  json://u:{SECRET}@127.0.0.1:9/a \n\n mailto://m:{SECRET}@example.com ")
    monkeypatch.setenv(
        "REWIND_NOTIFY_SITE_URLS", f'{{"Site A": "json://u:{SECRET}@h/a json://u:{SECRET}@h/b", "C": []}}'
    )
    assert list(notify_urls_setting("REWIND_NOTIFY_URLS")) == [
        f"json://u:{SECRET}@127.0.0.1:9/a",
        f"mailto://m:{SECRET}@example.com",
    ]
    assert dict(site_notify_urls_setting("REWIND_NOTIFY_SITE_URLS")) == {
        "Site A": (f"json://u:{SECRET}@h/a", f"json://u:{SECRET}@h/b")
    }
    monkeypatch.setenv("REWIND_NOTIFY_SITE_URLS", '{"Site A": 5}')
    with pytest.raises(ImproperlyConfigured, match="site 'Site A' needs a list"):
        site_notify_urls_setting("REWIND_NOTIFY_SITE_URLS")
    monkeypatch.delenv("REWIND_NOTIFY_URLS")
    assert notify_urls_setting("REWIND_NOTIFY_URLS") == ()


@pytest.mark.parametrize(
    ("url", "label", "secrets"),
    [
        (f"json://hook:{SECRET}@127.0.0.1:8080/a/b", f"json://hook:{MASK}@127.0.0.1:8080/a/b", [SECRET]),
        ("jsons://u:p%40ss%3Aw0rd@h/x", f"jsons://u:{MASK}@h/x", ["p@ss:w0rd", "p%40ss%3Aw0rd"]),
        (
            "slack://T1234ABCD/B5678EFGH/abcdefghijklmnopqrstuvwx",
            "slack://T...D/B...H/a...x",
            ["T1234ABCD", "B5678EFGH", "abcdefghijklmnopqrstuvwx"],
        ),
    ],
)
def test_a_channel_is_shown_with_its_credentials_masked(url: str, label: str, secrets: list[str]) -> None:
    info = describe(url)
    assert info is not None
    assert info.label == label
    assert set(secrets) <= set(info.secrets)
    said = f"could not post to {url} ({secrets[0]})"
    assert all(s not in redact(said, info.secrets) for s in secrets)
