"""What a load balancer or a process manager probes: is this replica alive, and may it take requests.

- ``/health/`` (liveness): the process answers. No database, no broker: a replica whose database
  is down is still alive, and restarting it would not bring the database back.
- ``/ready/`` (readiness): the replica can serve: its database answers and has every migration
  applied (checked once per process, until true). 503 otherwise, saying which, so a balancer
  takes it out of rotation. The task queue and the workers are reported, not required: a replica
  still serves reads, approvals and status polls while they are down, and every replica shares
  them, so failing on them would take the whole service out of rotation at once.

Neither needs a login, and neither tells more than a sentence per part (no address, no error text).
"""

from __future__ import annotations

from django.db import DatabaseError, connection
from django.db.migrations.executor import MigrationExecutor
from django.http import HttpRequest, JsonResponse

from rewind.workers.selectors import broker_outage_open, workers_seen

_migrated = False


def health(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"ok": True})


def ready(request: HttpRequest) -> JsonResponse:
    try:
        database = _database_state()
    except DatabaseError as exc:
        return JsonResponse({"ready": False, "database": f"not answering ({type(exc).__name__})"}, status=503)
    if database != "ok":
        return JsonResponse({"ready": False, "database": database}, status=503)
    outage = broker_outage_open()
    seen = workers_seen()
    return JsonResponse(
        {
            "ready": True,
            "database": "ok",
            "task_queue": "ok" if outage is None else f"not answering since {outage.started_at:%Y-%m-%dT%H:%M:%SZ}",
            "workers_alive": seen.alive,
        }
    )


def _database_state() -> str:
    global _migrated
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    if not _migrated:
        executor = MigrationExecutor(connection)
        pending = executor.migration_plan(executor.loader.graph.leaf_nodes())
        if pending:
            return f"{len(pending)} migration(s) not applied: run manage.py migrate"
        _migrated = True
    return "ok"
