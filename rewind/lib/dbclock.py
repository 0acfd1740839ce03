"""The database's clock: the one clock every process of the service shares.

A process whose host clock drifted would end every waiting guard at once, or reap sessions it takes for lost;
so the decisions that cannot be undone (a guard's timeout, the reaper's sweep, the expiry of what waits) are
taken on this clock. SQLite (one host) answers with the host's clock, which every process shares.
"""

from __future__ import annotations

from datetime import UTC, datetime

from django.db import connection


def database_now() -> datetime:
    """The database's current time (UTC, aware)."""
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SELECT statement_timestamp()")
            value = cursor.fetchone()[0]
            return value if value.tzinfo else value.replace(tzinfo=UTC)
        cursor.execute("SELECT strftime('%Y-%m-%d %H:%M:%f', 'now')")
        return datetime.strptime(cursor.fetchone()[0], "%Y-%m-%d %H:%M:%S.%f").replace(tzinfo=UTC)
