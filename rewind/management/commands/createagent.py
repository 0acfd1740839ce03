from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from rewind.agents import agent_token_issue_by_name, expiry_in_days
from rewind.agents.selectors import agent_owner_candidate
from rewind.audit import Actor
from rewind.errors import ApplicationError


class Command(BaseCommand):
    help = (
        "Create an MCP agent (if it does not exist) and issue it a bearer token. "
        "The token is printed once, alone on the last line; only its hash is stored."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name", help="agent name: letters, digits, - and _ (it appears in checkpoint tags)")
        parser.add_argument("--owner", help="username of the person answerable for the agent (default: the first superuser)")
        parser.add_argument("--expires-days", type=int, default=None, help="token lifetime in days (default: no expiry)")
        parser.add_argument("--label", default="", help="a note to tell this token apart in the admin")

    def handle(self, *args: Any, **options: Any) -> None:
        owner = None
        if options["owner"]:
            owner = agent_owner_candidate(options["owner"])
            if owner is None:
                raise CommandError(f"no user named {options['owner']!r}")
        try:
            expires_at = expiry_in_days(options["expires_days"])
            made = agent_token_issue_by_name(actor=Actor.system("manage.py createagent"), name=options["name"],
                                             owner=owner, label=options["label"], expires_at=expires_at)
        except ApplicationError as exc:
            raise CommandError(exc.message) from None
        if made.created:
            self.stderr.write(f"created agent {made.agent.name} (owner {made.agent.owner.get_username()})")
        expiry = f"expires {expires_at:%Y-%m-%d %H:%M} UTC" if expires_at else "never expires"
        self.stderr.write(f"token {made.issued.row.prefix}… for agent {made.agent.name} ({expiry}); it is shown once:")
        self.stdout.write(made.issued.token)
