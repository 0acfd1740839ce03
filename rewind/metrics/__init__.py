"""Prometheus metrics at ``/metrics`` (docs/metrics.md): a scrape reaches one of several processes, so nothing is
counted in process memory; every value is read from what all processes share when the scrape asks.
"""
