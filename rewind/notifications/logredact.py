"""A log filter that masks the secret parts of the configured notification URLs.

Apprise logs, at its debug and trace levels, URLs and the parts it parsed out of them
(passwords included), and urllib3 logs the paths it posts to (a Slack webhook's tokens).
``install_log_redaction`` puts this filter on both loggers, so whatever level an operator
turns on, those parts reach no handler.
"""

from __future__ import annotations

import logging

from rewind.notifications.apprise_urls import redact
from rewind.notifications.channels import configured_secrets_known

LOGGERS = ("apprise", "urllib3.connectionpool")


class RedactNotificationSecrets(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        secrets = configured_secrets_known()
        if not secrets:
            return True
        try:
            message = record.getMessage()
        except Exception:  # a malformed record is the logging module's to report, not ours
            return True
        clean = redact(message, secrets)
        if clean != message:
            record.msg, record.args = clean, None
        return True


_FILTER = RedactNotificationSecrets()


def install_log_redaction() -> None:
    """Attach the filter to the loggers that may print a notification URL (idempotent)."""
    for name in LOGGERS:
        log = logging.getLogger(name)
        if _FILTER not in log.filters:
            log.addFilter(_FILTER)
