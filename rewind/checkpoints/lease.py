"""The guard's lease, and handing it to a queued wait task.

A queued wait task holds ``queued:<token>`` for ``QUEUE_GRACE_S``; the running task holds its
run id for ``LEASE_S``, renewed every ``LEASE_S / 3`` by a heartbeat thread; once the
checkpoints are inserted, the site pollers hold ``poller``, extended by every round. An expired lease
on an unfinished guard means its task died (worker killed, message lost): it is queued again.

The wait task is queued by its name, so the services and the wait need not import the task
module (which imports them).
"""

from __future__ import annotations

from celery import current_app
from django.db import transaction

from rewind.checkpoints.models import ChangeGuard

# A queued wait task that has not started after this long is queued again (its message may
# be lost); a running task renews its lease every LEASE_S / 3 from a heartbeat thread.
QUEUE_GRACE_S = 60
LEASE_S = 15
# The wait task's hard time limit is the guard's timeout plus this margin.
TASK_MARGIN_S = 120
UNFINISHED = (ChangeGuard.Status.PENDING, ChangeGuard.Status.RUNNING)
# Once its checkpoints are inserted a guard's lease is the site pollers': each round extends
# it to its next round plus this grace. It runs out only when a poller's chain died.
POLLER_OWNER = "poller"
# A guard nobody works on yet: "queued:<token>". Its wait task (when one was queued) claims it
# by the token; the insert batch of its site's poller claims any queued guard.
QUEUED_PREFIX = "queued:"
POLLER_GRACE_S = 30
WAIT_TASK = "rewind.checkpoints.wait"  # in queued messages: never rename


def queue_wait(guard: ChangeGuard, token: str) -> None:
    """Queue the wait task once the current transaction commits, holding ``queued:<token>``.

    ``robust``: if the broker is down the record stays queued-but-unstarted and is queued
    again once its lease runs out (``guard_resume_if_stale``), so the caller still gets it.
    """
    guard_id, rid, limit = guard.pk, guard.request_id, guard.timeout_s + TASK_MARGIN_S
    transaction.on_commit(
        lambda: current_app.send_task(WAIT_TASK, args=[guard_id, rid], kwargs={"lease_token": token}, time_limit=limit),
        robust=True,
    )
