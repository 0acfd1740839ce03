from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from rewind.management.commands._agent_token import issue_agent_token
from rewind.mcp.clientconfig import CLIENTS, client_config
from rewind.mcp.endpoint import MCP_PATH, mcp_public_url


class Command(BaseCommand):
    help = (
        "Issue a token for an agent (creating the agent if needed) and print the configuration an MCP "
        "client accepts as it is, with where that client keeps it and where it loads the skill from."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("agent", help="agent name: letters, digits, - and _ (it appears in checkpoint tags)")
        parser.add_argument("--client", choices=list(CLIENTS), default="json", help="the MCP client (default: json)")
        parser.add_argument("--url", default=None, help=f"the MCP endpoint (default: REWIND_PUBLIC_URL + {MCP_PATH})")
        parser.add_argument("--owner", help="username answerable for a new agent (default: the first superuser)")
        parser.add_argument("--expires-days", type=int, default=None, help="token lifetime in days (default: none)")

    def handle(self, *args: Any, **options: Any) -> None:
        url = options["url"] or mcp_public_url()
        if not url.startswith(("https://", "http://")):
            raise CommandError(f"--url must be an http(s) URL, not {url!r}")
        made = issue_agent_token(
            command="mcpconfig",
            name=options["agent"],
            owner_name=options["owner"],
            label=f"mcpconfig {options['client']}",
            expires_days=options["expires_days"],
            stderr=self.stderr,
        )
        self.stderr.write(
            f"issued token {made.issued.row.prefix}… for agent {made.agent.name}; it is shown once, below"
        )
        self.stdout.write(client_config(options["client"], url=url, token=made.issued.token).as_text())
