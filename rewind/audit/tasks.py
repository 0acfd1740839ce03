"""Celery tasks of the audit log: thin wrappers. The names are in the beat schedule: keep them."""

from __future__ import annotations

from celery import shared_task

from rewind.audit import chain_pending
from rewind.audit.verification import audit_anchor_publish_reported


@shared_task(name="rewind.audit.publish_anchor", ignore_result=True)
def audit_publish_anchor() -> str:
    """Publish the chain's head outside the database, recording a break found on the way
    (``audit_anchor_publish_reported``); safe to repeat and to overlap."""
    return audit_anchor_publish_reported().note


@shared_task(name="rewind.audit.chain_pending", ignore_result=True)
def audit_chain_pending() -> int:
    """Chain the committed events still waiting (``chain_pending``); safe to repeat and to overlap."""
    return chain_pending()
