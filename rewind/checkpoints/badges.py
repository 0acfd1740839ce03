"""The retention forecast as the admin shows it: one badge, the same on guards and recoveries."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings
from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString


def _span(kind: str, text: str, title: str) -> SafeString:
    # Styled in rewind/static/rewind/admin.css: the content security policy allows no inline style.
    return format_html('<span class="retention-badge retention-{}" title="{}">{}</span>', kind, title, text)


def _in_words(delta: timedelta) -> str:
    hours = delta.total_seconds() / 3600
    return f"{hours:.0f} h" if hours >= 1 else f"{max(0, round(hours * 60))} min"


def retention_badge(
    leaves_at: datetime | None, left_seen_at: datetime | None = None, *, now: datetime | None = None
) -> SafeString | str:
    """ "-" when unknown; the time, with a warning badge within ``REWIND_RETENTION_WARN_H``; a red
    badge once a ZVM showed the checkpoint gone."""
    now = now or timezone.now()
    when = f"{leaves_at:%Y-%m-%d %H:%M} UTC" if leaves_at else ""
    if left_seen_at is not None:
        text = f"left the journal{' at about ' + when if when else ''}"
        return _span("gone", text, f"seen gone at {left_seen_at:%Y-%m-%d %H:%M} UTC; no recovery from it")
    if leaves_at is None:
        return "-"
    window = timedelta(hours=settings.REWIND_RETENTION_WARN_H)
    if window and leaves_at - now <= window:
        left = leaves_at - now
        text = f"⚠ leaves the journal in {_in_words(left)}" if left > timedelta(0) else "⚠ leaving the journal now"
        return _span("warn", text, f"estimated {when}; recover from it before then")
    return format_html("{} <small>(in {})</small>", when, _in_words(leaves_at - now))
