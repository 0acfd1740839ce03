"""Prometheus metrics at ``/metrics``: what the service did and what waits, read at scrape time.

The service runs several processes (uvicorn workers, Celery worker processes, beat), and a
scrape reaches one of them, so nothing here counts in process memory: every value is read
from what all processes share when the scrape asks (``collectors``), and ``access`` decides
who may ask.
"""
