"""Sending one message through one Apprise URL: one attempt, its outcome in words.

No retries here: Apprise makes one attempt per call (its URLs default to ``retry=0``), and
the delivery task retries with backoff, so every attempt is counted in its record.
"""

from __future__ import annotations

from rewind.notifications.apprise_urls import apprise_quiet, asset

# The whole call, connection and answer: a hung service must not hold a worker.
SEND_TIMEOUT_S = 30.0
_LEVELS = ("WARNING", "ERROR", "CRITICAL")


def apprise_send(url: str, *, title: str, body: str, notify_type: str) -> str | None:
    """Send once; None when the service took it, else why not, in Apprise's words.

    The reason is not redacted yet (the caller knows the channel's secrets). Raises nothing
    that a service's failure could cause: Apprise reports those in its result.
    """
    import apprise

    with apprise_quiet():
        service = apprise.Apprise.instantiate(url, asset=asset())
    if service is None:
        return "Apprise does not accept this channel's URL"
    sender = apprise.Apprise(asset=asset())
    sender.add(service)
    result = sender.notify(
        body=body, title=title, notify_type=notify_type, body_format=apprise.NotifyFormat.TEXT, timeout=SEND_TIMEOUT_S
    )
    try:
        if result:
            return None
        said = [entry.message for one in result for entry in one.logs() if entry.level in _LEVELS]
        return "; ".join(dict.fromkeys(said)) or f"the service did not take it ({result.status.name.lower()})"
    finally:
        result.close()  # Apprise may keep the captured log in a temporary file
