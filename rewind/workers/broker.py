"""The task queue (Celery's broker) as our processes see it: its name, whether it answers, and its refusals. A
worker's heartbeat asks it every beat, and a message it refuses is recorded: both go to ``services``, which
keeps the outages.
"""

from __future__ import annotations

import logging
import os
import socket
from urllib.parse import urlsplit

from celery import current_app
from django.db import transaction

from rewind.workers.services import broker_outage_noticed

logger = logging.getLogger(__name__)

# How long a probe waits for the broker: the heartbeat that asks must stay well within the
# workers' staleness bound (three beats).
PROBE_TIMEOUT_S = 3.0


def broker_name() -> str:
    """Where the task queue is, for people and agents: never the URL, which may hold a password."""
    url = urlsplit(str(current_app.conf.broker_url))
    if url.scheme in ("redis", "rediss"):
        return f"Redis at {url.hostname}:{url.port or 6379}{url.path or '/0'}"
    if url.scheme == "unix":
        return f"Redis at {url.path}"
    return f"the {url.scheme} queue"


def broker_unanswered() -> str | None:
    """None when the broker answers a new connection now, else what went wrong (one try, bounded)."""
    try:
        with current_app.connection_for_write() as conn:
            conn.ensure_connection(max_retries=0, timeout=PROBE_TIMEOUT_S)
    except Exception as exc:  # whatever the transport raises: the broker did not answer
        return _error_text(exc)
    return None


def queue_task(name: str, *args: object, what: str, countdown: float | None = None) -> None:
    """Queue the task ``name`` once the caller's transaction commits (at once outside one). By name, so a part's
    services need not import its tasks. A broker that refuses the message is recorded as down and never fails
    what the caller did: each task that matters has a sweep that queues again what was not taken."""

    def send() -> None:
        try:
            # A signature, not send_task: it runs the task in place where eager mode is on, as .delay() does.
            current_app.signature(name, args=args).apply_async(countdown=countdown)
        except Exception as exc:  # whatever the transport raises: the message was not taken
            broker_refused(exc, what)

    transaction.on_commit(send, robust=True)


def broker_refused(exc: BaseException, what: str) -> None:
    """A message was not taken: log it and record the outage (never raises: the caller's work is done)."""
    logger.warning("could not queue %s: the task queue did not take it (%s)", what, _error_text(exc))
    try:
        broker_outage_noticed(
            broker=broker_name(), error=_error_text(exc), noticed_by=f"{socket.gethostname()} pid {os.getpid()}"
        )
    except Exception:  # the database may be what failed too; the log above says enough
        logger.warning("could not record the task queue's outage", exc_info=True)


def _error_text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:500]
