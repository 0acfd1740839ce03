from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from rewind.management.commands._agent_token import issue_agent_token
from rewind.mcp import scopes


class Command(BaseCommand):
    help = (
        "Create an MCP agent (if it does not exist) and issue it a bearer token. "
        "The token is printed once, alone on the last line; only its hash is stored."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name", help="agent name: letters, digits, - and _ (it appears in checkpoint tags)")
        parser.add_argument(
            "--owner", help="username of the person answerable for the agent (default: the first superuser)"
        )
        parser.add_argument(
            "--expires-days", type=int, default=None, help="token lifetime in days (default: no expiry)"
        )
        parser.add_argument("--label", default="", help="a note to tell this token apart in the admin")
        parser.add_argument(
            "--scope",
            action="append",
            choices=list(scopes.ALL),
            help="what the token may do; repeat for several (default: all)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        made = issue_agent_token(
            command="createagent",
            name=options["name"],
            owner_name=options["owner"],
            label=options["label"],
            expires_days=options["expires_days"],
            stderr=self.stderr,
            granted=tuple(options["scope"] or scopes.ALL),
        )
        expires_at = made.issued.row.expires_at
        expiry = f"expires {expires_at:%Y-%m-%d %H:%M} UTC" if expires_at else "never expires"
        self.stderr.write(f"token {made.issued.row.prefix}… for agent {made.agent.name} ({expiry}); it is shown once:")
        self.stdout.write(made.issued.token)
