"""What a load balancer or a process manager probes (docs/deployment.md): ``/health/``, is this replica
alive, and ``/ready/``, may it take requests.

Liveness asks no database: restarting a replica would not bring the database back. Readiness needs the
database and its migrations but only reports the queue and the workers: every replica shares them, so
failing on them would take the whole service out of rotation at once. Neither needs a login or tells more
than a sentence per part.
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
