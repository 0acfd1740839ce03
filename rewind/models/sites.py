"""Kept for migration 0006, which names this validator by this path; the model is in ``rewind.sites.models``."""

from rewind.sites.models import validate_requests_per_s

__all__ = ["validate_requests_per_s"]
