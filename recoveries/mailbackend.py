"""The mail backend used when no SMTP server is configured (EMAIL_HOST unset, not DEBUG)."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from django.core.mail.backends.base import BaseEmailBackend
from django.core.mail.message import EmailMessage

logger = logging.getLogger(__name__)


class NoMailBackend(BaseEmailBackend):
    """Sends nothing and says so once per batch, at INFO: a deployment without mail is legitimate (approvers watch
    the admin queue), and an error would make the notification task retry."""

    def send_messages(self, email_messages: Sequence[EmailMessage]) -> int:
        if email_messages:
            logger.info("no mail configured (set EMAIL_HOST): %d message(s) not sent", len(email_messages))
        return 0
