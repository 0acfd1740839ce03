"""Template tags for the admin's pages: the one status badge, and numbers that link to their list."""

from __future__ import annotations

from typing import Any

from django import template
from django.utils.html import format_html
from django.utils.safestring import SafeString

from rewind.lib.admin_base import status_badge

register = template.Library()


@register.simple_tag
def badge(status: str, label: str | None = None) -> SafeString:
    """``{% badge guard.status %}``: the same badge the admin's lists show (``rewind.lib.admin_base``)."""
    return status_badge(str(status), label)


@register.simple_tag
def count(number: Any, label: str = "") -> SafeString:
    """``{% count data.failed "failed" %}``: a number linking to the list of exactly what it counts; ``number`` has
    ``value``, ``url`` and ``tone``. A zero is shown quieter, still a link; a label ``"guard|guards"`` gives the
    singular for 1."""
    css = "rw-count" + ("" if number.value else " rw-count-zero") + (f" rw-count-{number.tone}" if number.tone else "")
    one, _, many = label.partition("|")
    text = f"{number.value} {one if number.value == 1 or not many else many}".strip()
    return format_html('<a class="{}" href="{}">{}</a>', css, number.url, text)
