from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from rewind.management.commands._agent_token import issue_agent_token
from rewind.mcp import scopes
from rewind.mcp.clientconfig import CLIENTS, OAUTH_ONLY, client_config
from rewind.mcp.endpoint import MCP_PATH, mcp_public_url


class Command(BaseCommand):
    help = (
        "Print the configuration an MCP client accepts as it is (on standard output: paste it, or redirect it "
        "into the client's file) and, on standard error, where it goes and how the client gets the agent's "
        "token (issued now, creating the agent if needed; the token mcpconfig issued before for the same agent "
        "and client is revoked), or, with --oauth, no token: the client signs in."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "agent", nargs="?", help="agent name: letters, digits, - and _ (it appears in checkpoint tags)"
        )
        parser.add_argument("--client", choices=list(CLIENTS), default="json", help="the MCP client (default: json)")
        parser.add_argument(
            "--oauth",
            action="store_true",
            help="no token: the client signs in with OAuth and a person picks the agent (always so for "
            + ", ".join(sorted(OAUTH_ONLY))
            + ")",
        )
        parser.add_argument(
            "--url",
            default=None,
            help=f"the MCP endpoint (default: REWIND_PUBLIC_URL + {MCP_PATH}, else the running make run's, "
            "else port REWIND_PORT)",
        )
        parser.add_argument("--owner", help="username answerable for a new agent (default: the first superuser)")
        parser.add_argument("--expires-days", type=int, default=None, help="token lifetime in days (default: none)")
        parser.add_argument(
            "--scope",
            action="append",
            choices=list(scopes.ALL),
            help="what the token may do; repeat for several (default: all)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        url = options["url"] or mcp_public_url()
        if not url.startswith(("https://", "http://")):
            raise CommandError(f"--url must be an http(s) URL, not {url!r}")
        client = options["client"]
        token = None
        if not (options["oauth"] or client in OAUTH_ONLY):
            if not options["agent"]:
                raise CommandError("name the agent the token is for (or use --oauth: a person picks it at sign-in)")
            made = issue_agent_token(
                command="mcpconfig",
                name=options["agent"],
                owner_name=options["owner"],
                label=f"mcpconfig {client}",
                expires_days=options["expires_days"],
                granted=tuple(options["scope"] or scopes.ALL),
                stderr=self.stderr,
                replace=True,  # the configuration printed before, and its token, are replaced
            )
            self.stderr.write(f"issued token {made.issued.row.prefix}… for agent {made.agent.name}; it is shown once")
            token = made.issued.token
        config = client_config(client, url=url, token=token)
        self.stdout.write(config.config)
        self.stderr.write(config.guide())
