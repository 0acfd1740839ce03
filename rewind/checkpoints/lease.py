"""The lease of a site's poller: who may run its next round, and until when.

A ``SitePoller`` row is idle, queued (``queued:<token>``: a round waits in the queue with that token) or running
(``run:<id>``, renewed between its ZVM calls). The strings are stored; code reads them through ``Lease``.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta

# A running round holds the site this long, renewed between its ZVM calls.
ROUND_LEASE_S = 15
# A queued round that has not started this long after its time is replaced (its message may be lost).
QUEUE_GRACE_S = 30

_QUEUED = "queued:"
_RUNNING = "run:"


@dataclass(frozen=True)
class Lease:
    owner: str = ""
    expires_at: datetime | None = None

    @classmethod
    def queued(cls, at: datetime) -> Lease:
        """A round queued to start at ``at``; its message carries the lease's ``token``."""
        return cls(f"{_QUEUED}{uuid.uuid4().hex}", at + timedelta(seconds=QUEUE_GRACE_S))

    @classmethod
    def running(cls, now: datetime) -> Lease:
        return cls(f"{_RUNNING}{uuid.uuid4().hex}", now + timedelta(seconds=ROUND_LEASE_S))

    @staticmethod
    def queued_owner(token: str) -> str:
        """The owner a queued round's message claims by its token."""
        return f"{_QUEUED}{token}"

    @property
    def token(self) -> str:
        """The token a queued round's message carries ("" unless queued)."""
        return self.owner.removeprefix(_QUEUED) if self.owner.startswith(_QUEUED) else ""

    def alive(self, now: datetime) -> bool:
        return bool(self.owner) and self.expires_at is not None and self.expires_at > now

    def is_running(self, now: datetime) -> bool:
        return self.alive(now) and self.owner.startswith(_RUNNING)

    def fields(self) -> dict[str, object]:
        return {"lease_owner": self.owner, "lease_expires_at": self.expires_at}
