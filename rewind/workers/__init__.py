"""Celery workers seen from the service: their heartbeats, so people and agents can tell a
guard that waits for a worker from a guard that waits for a ZVM."""
