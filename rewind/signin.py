"""People's sign-in: throttled and locked out by django-axes (docs/security.md), each lock-out logged and audited.

``SignInBackend`` leaves an ``authenticate()`` without a request (the test client's login, a management command)
to the next backend: there is no address to count, and no such call comes from the network.
"""

from __future__ import annotations

import logging
from typing import Any

from axes.backends import AxesStandaloneBackend
from django.conf import settings
from django.http import HttpRequest
from django.utils import timezone

from rewind.audit import Actor, audit_record
from rewind.audit.actions import SignInAction
from rewind.audit.models import AuditEvent

logger = logging.getLogger(__name__)


class SignInBackend(AxesStandaloneBackend):
    def authenticate(self, request: HttpRequest | None, username: str | None = None, password: str | None = None, **kwargs: Any) -> None:  # fmt: skip
        if request is None:
            return None
        super().authenticate(request, username, password, **kwargs)
        return None


def record_lockout(sender: object, request: HttpRequest | None = None, username: str | None = None, ip_address: str | None = None, **kwargs: Any) -> None:  # fmt: skip
    """axes' ``user_locked_out`` receiver: log it and append ``signin.locked_out`` to the audit log.

    axes sends it again for every attempt while the pair is locked out; the log hears each, the
    audit log one per lock-out (an attacker hammering a locked pair must not grow the chain).
    """
    logger.warning("sign-in locked out: user %r from %s after too many failed logins", username, ip_address)
    since = timezone.now() - settings.AXES_COOLOFF_TIME
    target = ("user", username or "")
    recorded = AuditEvent.objects.filter(
        action=SignInAction.LOCKED_OUT, target_type=target[0], target_id=target[1], time__gte=since
    ).values_list("data", flat=True)
    if any(data.get("ip_address") == (ip_address or "") for data in recorded):
        return
    audit_record(
        actor=Actor.system("sign-in"),
        action=SignInAction.LOCKED_OUT,
        target=target,
        data={"username": username or "", "ip_address": ip_address or ""},
    )
