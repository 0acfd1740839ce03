from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from django.core.management.base import BaseCommand, CommandParser
from django.utils import timezone

from recoveries.reaper import recoveries_reap


class Command(BaseCommand):
    help = "Run the FLR orphan reaper once (what beat runs every REWIND_REAPER_INTERVAL_S) and print what it did."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--ahead-s",
            type=int,
            default=0,
            help="act as if this many seconds had passed (treats runs as overdue sooner; for drills)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        now = timezone.now() + timedelta(seconds=options["ahead_s"])
        report = recoveries_reap(now=now)
        self.stdout.write(json.dumps(report.as_dict(), indent=2, sort_keys=True))
