"""rewind.bulk.update_rows writes what each row holds in memory, as save() would, in one statement."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from rewind.bulk import update_rows
from rewind.models import ChangeGuard, TaggedCheckpoint

pytestmark = pytest.mark.django_db


def _guard(n: int) -> ChangeGuard:
    return ChangeGuard.objects.create(
        agent_name="fixer",
        action="edit",
        vm_identifier=f"vm-{n}",
        vm_name=f"vm{n}",
        change_id=f"c{n}",
        tag=f"t{n}",
        timeout_s=60,
    )


def test_each_row_gets_its_own_values_of_every_kind_and_other_rows_and_columns_keep_theirs() -> None:
    guards = [_guard(n) for n in range(3)]
    rows = [TaggedCheckpoint.objects.create(guard=g, vpg_identifier=f"vpg-{g.pk}", vpg_name="v") for g in guards]
    when = timezone.now() + timedelta(hours=1)
    rows[0].status, rows[0].next_poll_at, rows[0].waited_ms, rows[0].error = "listed", when, 1234, "é ✓"
    rows[1].status, rows[1].next_poll_at, rows[1].waited_ms, rows[1].error = "failed", None, None, ""
    with CaptureQueriesContext(connection) as queries:
        update_rows(rows[:2], ["status", "next_poll_at", "waited_ms", "error"])
    assert len(queries) == 1  # one statement, executed for each row
    got = {r.pk: r for r in TaggedCheckpoint.objects.all()}
    assert (got[rows[0].pk].status, got[rows[0].pk].next_poll_at, got[rows[0].pk].waited_ms) == ("listed", when, 1234)
    assert got[rows[0].pk].error == "é ✓"
    assert (got[rows[1].pk].status, got[rows[1].pk].next_poll_at, got[rows[1].pk].waited_ms) == ("failed", None, None)
    assert got[rows[2].pk].status == TaggedCheckpoint.Status.PENDING  # not given: untouched
    assert got[rows[0].pk].vpg_identifier == rows[0].vpg_identifier  # not named: untouched


def test_a_field_that_is_no_column_is_refused() -> None:
    guard = _guard(9)
    with pytest.raises(ValueError, match="is not a column"):
        update_rows([guard], ["vpgs"])
    update_rows([], ["status"])  # nothing to write: nothing asked of the database
