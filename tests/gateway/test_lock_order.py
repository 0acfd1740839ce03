"""A call through the gateway never waits for a listing of its upstream while holding what the listing needs.

A call of an unlisted tool locks its tool's sighting, inserts its row and commits; the row's
foreign key to the upstream is checked at commit (Django makes it deferred on PostgreSQL),
which takes a key-share lock on the upstream's row. A listing (``upstream_tools_record``) locks
the upstream's row, then the sightings of its tools. Had the listing locked the upstream FOR
UPDATE, a committing call would wait for it while holding the sighting the listing waits for:
PostgreSQL found that deadlock once in a 30-minute soak (bench/load.py). SQLite takes one write
lock per transaction, so two transactions cannot deadlock there.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
from django.db import connection, transaction

from catalog.models import ToolSighting
from catalog.services import tool_sighting_record
from rewind.audit import Actor
from rewind.gateway.models import GatewayCall, UpstreamTool
from rewind.gateway.services import ListedTool, gateway_call_record, upstream_create, upstream_tools_record
from tests.fixtures import wait_until

ADMIN = Actor.system("test")
WAIT_S = 20.0
SCHEMA = {"type": "object", "properties": {"host": {"type": "string"}}}


def _listed(name: str) -> ListedTool:
    return ListedTool(name, "", "", SCHEMA, None, None, None)


def _lock_waits() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_locks WHERE NOT granted")
        return int(cursor.fetchone()[0])


@pytest.mark.django_db(transaction=True)
def test_a_call_committing_while_its_upstream_is_listed_is_not_a_deadlock() -> None:
    if connection.vendor != "postgresql":
        pytest.skip("row locks: SQLite takes one write lock per transaction, so no two transactions deadlock there")
    upstream = upstream_create(actor=ADMIN, name="shell", url="http://127.0.0.1:1/mcp")
    upstream_tools_record(upstream=upstream, listed=[_listed("read")], reserved=set())
    tool = UpstreamTool.objects.get(upstream=upstream, name="read")
    listing: dict[str, Any] = {}

    def list_again() -> None:
        try:
            listing["report"] = upstream_tools_record(upstream=upstream, listed=[_listed("read")], reserved=set())
        except Exception as exc:  # the test reports whatever stopped the listing
            listing["error"] = exc
        finally:
            connection.close()

    lister = threading.Thread(target=list_again)
    with transaction.atomic():
        # The call's first steps, as gateway_call_record takes them: the sighting, then its row.
        tool_sighting_record(tool="shell/read", agent_name="agent", argument_names=["host"])
        lister.start()
        # The listing holds the upstream and waits for the sighting; a listing that ended did not wait.
        wait_until(lambda: _lock_waits() or listing, WAIT_S, what="the listing waiting for the call's sighting")
        assert not listing, f"the listing never waited for the call's sighting: {listing}"
        call = gateway_call_record(
            agent_name="agent",
            agent_id=None,
            tool=tool,
            arguments={"host": "web01"},
            request_id="",
            decision=GatewayCall.Decision.PASSED,
            reason="read-only",
        )
    # Committed: its foreign key's key-share lock did not wait for the listing's lock.
    lister.join(WAIT_S)
    assert not lister.is_alive()
    assert "error" not in listing, listing.get("error")
    assert listing["report"].exported == ["read"]
    assert GatewayCall.objects.get(pk=call.pk).decision == GatewayCall.Decision.PASSED
    assert ToolSighting.objects.get(tool="shell/read").count == 1
