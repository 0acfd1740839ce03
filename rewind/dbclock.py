"""The database's clock: the one clock every process of the service shares.

Each process reads its own clock for everything (``timezone.now()``), and an NTP that stopped on
one host puts that process minutes off the others. Most of what it does then is only early or
late; the decisions that cannot be undone are taken on the database's clock instead: a guard
ended as timed out (a worker five minutes ahead would end every waiting guard at once, "not
listed within 300 s"), the reaper's sweep (which unmounts runs it takes for overdue and ends
sessions it takes for lost), the expiry of what waits. One query each time; workers also record
how far their clock is from it (``rewind.workers``), so the dashboard shows a skewed process.

PostgreSQL answers with the server's clock. SQLite runs inside the process, and reads the host's
clock below Python's, which every process of a SQLite installation (one host) shares.
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
