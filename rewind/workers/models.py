from __future__ import annotations

from django.db import models


class WorkerHeartbeat(models.Model):
    """One Celery worker's last sign of life, written every few seconds by a thread of its main process: a worker
    stopped, hung or killed stops writing; one that shuts down cleanly removes its row."""

    hostname = models.CharField(max_length=255, unique=True, help_text="Celery's node name, e.g. celery@host.")
    pid = models.PositiveIntegerField()
    concurrency = models.PositiveIntegerField(default=0)
    started_at = models.DateTimeField()
    seen_at = models.DateTimeField(db_index=True)
    clock_offset_s = models.FloatField(
        null=True, blank=True, help_text="How far its clock is from the database's (positive: ahead), at its last beat."
    )

    class Meta:
        verbose_name = "worker"
        verbose_name_plural = "workers"
        ordering = ["hostname"]

    def __str__(self) -> str:
        return self.hostname


class BrokerOutage(models.Model):
    """A stretch of time in which the task queue did not answer our processes, opened by the first process to find
    it silent and closed by the first probe it answers. While one is open nothing can be queued, so waiting
    guards say so, and a guard that timed out meanwhile names it."""

    broker = models.CharField(max_length=255, help_text="Where the queue is, without credentials.")
    started_at = models.DateTimeField(db_index=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    error = models.CharField(max_length=1000, blank=True, help_text="What the first refusal said.")
    noticed_by = models.CharField(max_length=255, help_text="The process that noticed it first.")

    class Meta:
        verbose_name = "task queue outage"
        ordering = ["-started_at"]
        constraints = [
            # Two processes noticing at once open one outage: the loser's insert fails.
            models.UniqueConstraint(
                fields=["broker"], condition=models.Q(ended_at__isnull=True), name="workers_one_open_broker_outage"
            )
        ]

    def __str__(self) -> str:
        return f"{self.broker} from {self.started_at:%Y-%m-%d %H:%M:%S}"
