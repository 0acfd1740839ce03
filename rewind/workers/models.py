from __future__ import annotations

from django.db import models


class WorkerHeartbeat(models.Model):
    """One Celery worker's last sign of life, written every few seconds by a thread of its main process.

    A worker that is stopped (SIGSTOP), hung or killed stops writing; one that shuts down
    cleanly removes its row. Rows older than a day are pruned by the next heartbeat.
    """

    hostname = models.CharField(max_length=255, unique=True, help_text="Celery's node name, e.g. celery@host.")
    pid = models.PositiveIntegerField()
    concurrency = models.PositiveIntegerField(default=0)
    started_at = models.DateTimeField()
    seen_at = models.DateTimeField(db_index=True)

    class Meta:
        verbose_name = "worker"
        verbose_name_plural = "workers"
        ordering = ["hostname"]

    def __str__(self) -> str:
        return self.hostname
