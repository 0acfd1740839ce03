from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from rewind.audit import Actor
from rewind.audit.verification import audit_chain_verify


class Command(BaseCommand):
    help = "Prove the audit log's hash chain, or name the first broken event; the verdict is itself audited."

    def handle(self, *args: Any, **options: Any) -> None:
        result = audit_chain_verify(actor=Actor.system("manage.py audit_verify"))
        if result.event is not None:
            self.stdout.write(f"recorded as audit event #{result.event.seq} ({result.event.action})")
        else:
            self.stderr.write(f"this verification could not be recorded: {result.record_error}")
        if not result.ok:
            raise CommandError(
                f"audit chain BROKEN at event #{result.broken_at}: {result.reason} "
                f"({result.events} events before it are intact)"
            )
        self.stdout.write(f"audit chain OK: {result.events} events, every hash verified")
