from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from rewind.audit import Actor
from rewind.audit.verification import audit_chain_verify
from rewind.notifications.audit_chain import audit_chain_announce_broken


class Command(BaseCommand):
    help = (
        "Prove the audit log's hash chain and hold it against the anchors published outside the database "
        "(the newest; every one with --anchors), or name the first broken event or anchor; the verdict is "
        "itself audited, then anchored."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--anchors",
            nargs="*",
            metavar="FILE",
            type=Path,
            help="check every anchor, of REWIND_AUDIT_ANCHOR_FILE or of the FILEs given (e.g. a copy from syslog)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        files = options["anchors"]
        for path in files or ():
            if not path.is_file():
                raise CommandError(f"no anchor file at {path}")
        result = audit_chain_verify(
            actor=Actor.system("manage.py audit_verify"), every_anchor=files is not None, anchor_files=files or ()
        )
        if result.event is not None:
            event = result.event
            where = f"#{event.seq}" if event.seq is not None else f"id {event.pk}, chained as soon as the lock is free"
            self.stdout.write(f"recorded as audit event {where} ({event.action})")
        else:
            self.stderr.write(f"this verification could not be recorded: {result.record_error}")
        self.stdout.write(f"anchor: {result.anchor_note}")
        if not result.ok:
            if result.event is not None:
                audit_chain_announce_broken()  # at once; the beat's sweep would within a minute
            intact = f"{result.events} events before it are" if result.events != 1 else "1 event before it is"
            raise CommandError(f"audit chain BROKEN at event #{result.broken_at}: {result.reason} ({intact} intact)")
        anchors = result.check.anchors
        where = ", ".join(str(p) for p in result.check.anchor_files)
        held = f"matches {anchors} anchor(s) of {where}" if anchors else f"no anchor published yet in {where}"
        self.stdout.write(f"audit chain OK: {result.events} events, every hash verified; {held}")
