from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from rewind.audit import verify_chain


class Command(BaseCommand):
    help = "Prove the audit log's hash chain, or name the first broken event."

    def handle(self, *args: Any, **options: Any) -> None:
        checked, problem = verify_chain()
        if problem is not None:
            raise CommandError(
                f"audit chain BROKEN at event #{problem.seq}: {problem.reason} ({checked} events before it are intact)"
            )
        self.stdout.write(f"audit chain OK: {checked} events, every hash verified")
