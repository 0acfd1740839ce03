"""Helpers of the ZVM client's own tests."""

from __future__ import annotations

from collections.abc import Callable

from rewind.zvm import ZvmClient

MakeClient = Callable[..., ZvmClient]  # the make_client fixture: make_client(slug="site-a", **connection fields)
