"""Counts of audit events, kept in this process and brought up to date at each scrape.

Not one GROUP BY over the whole log per scrape, which would cost more every day. Events are chained in commit
order and nothing is chained later at or below the chain's end (``audit_chain_position``), so while the event at
the last position read keeps its hash, the counts stand and only newer events are read; anything else (a
restored database) starts over. Every process computes the same numbers, so a scrape may reach any of them.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Sequence

from rewind.audit.selectors import audit_chain_position, audit_counts, audit_event_hash


class AuditTally:
    def __init__(self, *, actions: Sequence[str], keys: Sequence[str]) -> None:
        """Count events of ``actions`` by ``keys`` (see ``rewind.audit.selectors.audit_counts``)."""
        self.actions = list(actions)
        self.keys = list(keys)
        self._lock = threading.Lock()
        self._seq = 0
        self._hash = ""
        self._counts: Counter[tuple[str, ...]] = Counter()

    def counts(self) -> dict[tuple[str, ...], int]:
        with self._lock:
            seq, head_hash = audit_chain_position()
            if self._seq and (seq < self._seq or audit_event_hash(self._seq) != self._hash):
                self._seq, self._hash, self._counts = 0, "", Counter()
            if seq > self._seq:
                for key, n in audit_counts(actions=self.actions, keys=self.keys, after_seq=self._seq, upto_seq=seq):
                    self._counts[key] += n
                self._seq, self._hash = seq, head_hash
            return dict(self._counts)
