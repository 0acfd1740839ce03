"""Properties of the audit log's canonical form: the same content always gives the same hash, whatever
order its keys came in, and what the database gives back hashes to what was stored."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from django.db import transaction
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rewind.audit import Actor, AuditEntry, audit_append, compute_hash, event_hash, mask_secrets
from rewind.models import AuditEvent

leaves = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**53), 2**53), st.floats(allow_nan=False, allow_infinity=False, width=64),
    st.text(max_size=20),
)  # fmt: skip
data = st.recursive(
    leaves, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=15,
)  # fmt: skip
FIELDS: dict[str, Any] = dict(
    seq=7, time=datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC), actor_type="agent", actor="bot", action="x.y",
    target_type="t", target_id="1", target_repr="one", request_id="r-1", prev_hash="0" * 64,
)  # fmt: skip


def _reordered(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _reordered(value[k]) for k in reversed(list(value))}
    if isinstance(value, list):
        return [_reordered(v) for v in value]
    return value


@settings(max_examples=500, deadline=None)
@given(content=st.dictionaries(st.text(max_size=10), data, max_size=6))
def test_the_same_content_in_any_key_order_gives_the_same_hash(content: dict[str, Any]) -> None:
    masked = mask_secrets(content)
    assert compute_hash(**FIELDS, data=masked) == compute_hash(**FIELDS, data=_reordered(masked))
    assert compute_hash(**FIELDS, data=masked) != compute_hash(**{**FIELDS, "seq": 8}, data=masked)


@pytest.mark.django_db
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(content=st.dictionaries(st.text(max_size=10), data, max_size=6), actor=st.text(min_size=1, max_size=40))
def test_what_the_database_gives_back_hashes_to_what_was_stored(content: dict[str, Any], actor: str) -> None:
    with transaction.atomic():
        (pk,) = audit_append([AuditEntry(Actor.agent(actor), "test.property", ("thing", "1"), content)])
        event = AuditEvent.objects.get(pk=pk)
        assert event_hash(event) == event.hash
        transaction.set_rollback(True)
