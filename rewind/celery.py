"""The Celery app and the beat schedule (every periodic job lives here)."""

from __future__ import annotations

import logging
import os
import threading
from datetime import UTC, datetime
from typing import Any

from celery import Celery, bootsteps
from celery.signals import worker_ready, worker_shutdown

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "rewind.settings")

app = Celery("rewind")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
# Parts inside the rewind app keep their tasks in their own package.
app.autodiscover_tasks(["rewind.checkpoints", "rewind.sites", "rewind.notifications", "rewind.gateway", "rewind.audit"])


@app.on_after_finalize.connect
def _install_beat_schedule(sender: Celery, **kwargs: object) -> None:
    from django.conf import settings

    sender.conf.beat_schedule = {
        # Unmount our finished or overdue FLR sessions, mark vanished ones ended and expire
        # stale recovery requests. Safe to overlap: every step is a compare-and-swap.
        "recoveries-reap": {
            "task": "recoveries.reap",
            "schedule": float(settings.REWIND_REAPER_INTERVAL_S),
        },
        # Queue again the recoveries that wait for their recovery site once it answers (the probe
        # closes its circuit), and fail those that expired meanwhile. Safe to overlap: CAS.
        "recoveries-resume-waiting": {
            "task": "recoveries.resume_waiting",
            "schedule": float(min(settings.ZVM_CIRCUIT_PROBE_S, 30.0)),
        },
        # Restores in place: compare the files whose run died after the pull, and queue again the
        # write-backs whose step message was lost. Safe to overlap: compare-and-swap.
        "recoveries-restores-resume": {
            "task": "recoveries.restores_resume",
            "schedule": 60.0,
        },
        # Restart each site poller whose chain died (its worker killed: the lease its rounds renew ran out; or
        # its round queued before the broker's last outage, so perhaps lost), and end the guards whose site was
        # removed while they waited. Safe to overlap: compare-and-swap.
        "checkpoints-resume-stale": {
            "task": "rewind.checkpoints.resume_stale",
            "schedule": 30.0,
        },
        # Give each site whose circuit is open (its ZVM stopped answering) its one trial call
        # when due, so it is used again as soon as it answers. Safe to overlap: trials are claimed.
        "sites-probe": {
            "task": "rewind.sites.probe",
            "schedule": float(min(settings.ZVM_CIRCUIT_PROBE_S, 30.0)),
        },
        # Ask every enabled site's ZVM who it is, so identity, clock and last error stay current.
        # Sites are asked at once, through their circuits; safe to overlap.
        "sites-refresh-identity": {
            "task": "rewind.sites.refresh_identity",
            "schedule": float(settings.REWIND_SITE_REFRESH_INTERVAL_S),
        },
        # Record the checkpoints that Zerto listed only after their guard timed out, so a
        # recovery may use them. One listing per VPG per sweep; safe to overlap (CAS).
        "checkpoints-listed-late": {
            "task": "rewind.checkpoints.listed_late",
            "schedule": float(settings.REWIND_LATE_LISTING_INTERVAL_S),
        },
        # Estimate when each tagged checkpoint leaves its VPG's journal (one VPG read per VPG,
        # each site in a thread of its own, bounded by the interval), then warn once per
        # checkpoint leaving within REWIND_RETENTION_WARN_H. Safe to overlap (CAS).
        "checkpoints-retention": {
            "task": "rewind.checkpoints.retention",
            "schedule": float(settings.REWIND_RETENTION_INTERVAL_S),
        },
        # Tell the channels about pending recoveries that expire within REWIND_NOTIFY_EXPIRY_WARN_MIN,
        # and sites unreachable for REWIND_NOTIFY_SITE_DOWN_MIN. Each event is recorded once per
        # channel (a unique key decides), so sweeps may overlap.
        "recoveries-warn-expiring": {
            "task": "recoveries.warn_expiring",
            "schedule": 60.0,
        },
        "sites-notify-down": {
            "task": "rewind.sites.notify_down",
            "schedule": 60.0,
        },
        # List each upstream MCP server's tools again: a tool added upstream is exported (and
        # becomes a sighting) without anyone asking; one that went away is no longer listed.
        "gateway-refresh-tools": {
            "task": "rewind.gateway.refresh_tools",
            "schedule": float(settings.REWIND_GATEWAY_REFRESH_INTERVAL_S),
        },
        # Calls held for a person: move on those whose guard ended unread, expire those nobody
        # decided in time, queue the release of approvals nobody released. Safe to overlap (CAS).
        "gateway-held-calls": {
            "task": "rewind.gateway.held_calls_sweep",
            "schedule": 30.0,
        },
        # A failed check of the audit chain (audit_verify, or the anchor publisher finding a
        # break) is told to the channels once; nothing failed costs one indexed read.
        "notifications-audit-chain-broken": {
            "task": "rewind.notifications.announce_audit_chain_broken",
            "schedule": 60.0,
        },
        # Close notification deliveries whose worker died mid-send; queue again those whose task
        # was lost. Safe to overlap: compare-and-swap.
        "notifications-settle": {
            "task": "rewind.notifications.settle",
            "schedule": 300.0,
        },
        # Publish the audit chain's head, signed, outside the database (file, syslog): a chain
        # someone cut or emptied no longer verifies. Nothing new: nothing published. Run from
        # the beat only (appends to one file); a missed run only widens the gap between anchors.
        "audit-publish-anchor": {
            "task": "rewind.audit.publish_anchor",
            "schedule": float(settings.REWIND_AUDIT_ANCHOR_INTERVAL_S),
        },
        # Chain the audit events a writer committed but did not live to chain (each commit chains
        # what is waiting): nothing waiting costs one query. Safe to overlap (the chain lock).
        "audit-chain-pending": {
            "task": "rewind.audit.chain_pending",
            "schedule": float(settings.REWIND_AUDIT_CHAIN_INTERVAL_S),
        },
    }


_heartbeat_stop: dict[str, threading.Event] = {}


class _BrokerConnection(bootsteps.StartStopStep):
    """Records an outage when the worker's consumer connects again after its connection broke.

    Celery stops the consumer's steps when the connection breaks and starts them again once it
    is back, so a broker restart shorter than a heartbeat is seen too: what it held may be lost.
    """

    requires = {"celery.worker.consumer.connection:Connection"}

    def __init__(self, parent: Any, **kwargs: Any) -> None:
        super().__init__(parent, **kwargs)
        self.lost_at: datetime | None = None

    def start(self, parent: Any) -> None:
        if self.lost_at is None:
            return  # the first connection
        lost_at, self.lost_at = self.lost_at, None
        from rewind.workers.broker import broker_name
        from rewind.workers.services import broker_reconnected

        try:
            broker_reconnected(broker=broker_name(), lost_at=lost_at, noticed_by=str(parent.hostname))
        except Exception:  # the database too may be away; the consumer must carry on regardless
            logging.getLogger(__name__).warning("could not record the task queue's outage", exc_info=True)

    def stop(self, parent: Any) -> None:
        # Also on shutdown, after which no start follows.
        self.lost_at = datetime.now(UTC)


app.steps["consumer"].add(_BrokerConnection)


@worker_ready.connect
def _start_worker_heartbeat(sender: object, **kwargs: object) -> None:
    # A worker says it is alive from a thread of its main process (rewind.workers.services):
    # agents waiting on a guard and the admin tell "no worker" from "a slow ZVM" by it. The same
    # thread asks the broker, so a waiting guard is told when the queue itself is down.
    from rewind.workers.broker import broker_name, broker_unanswered
    from rewind.workers.services import BrokerProbe, worker_heartbeat_start

    hostname = str(getattr(sender, "hostname", "") or "celery")
    controller = getattr(sender, "controller", None)
    concurrency = int(getattr(controller, "concurrency", 0) or 0)
    probe = BrokerProbe(broker=broker_name(), ask=broker_unanswered)
    _heartbeat_stop[hostname] = worker_heartbeat_start(hostname=hostname, concurrency=concurrency, probe=probe)


@worker_shutdown.connect
def _stop_worker_heartbeat(sender: object, **kwargs: object) -> None:
    from rewind.audit.verification import audit_anchor_publish_at_exit
    from rewind.workers.services import worker_heartbeat_remove

    for hostname, stop in list(_heartbeat_stop.items()):
        stop.set()
        try:
            worker_heartbeat_remove(hostname=hostname)
        except Exception:  # shutting down: a database that went first must not stop the worker's exit
            pass
    # What its tasks recorded last is anchored now, not at the beat's next run (which may not come).
    audit_anchor_publish_at_exit(f"worker {getattr(sender, 'hostname', '') or 'celery'}")
