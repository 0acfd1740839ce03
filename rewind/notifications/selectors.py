"""Reads of notifications: the channels as the admin shows them (no URL, no secret)."""

from __future__ import annotations

from dataclasses import dataclass

from rewind.notifications.channels import channels_configured


@dataclass(frozen=True)
class ChannelView:
    key: str
    label: str
    scope: str
    builtin: bool


def channel_views() -> list[ChannelView]:
    return [ChannelView(c.key, c.label, c.scope, c.builtin is not None) for c in channels_configured()]
