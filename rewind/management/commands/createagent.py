from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction

from rewind.agents import agent_create, agent_token_issue, default_owner, expiry_in_days
from rewind.agents.models import Agent
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
        actor = Actor.system("manage.py createagent")
        try:
            expires_at = expiry_in_days(options["expires_days"])
            with transaction.atomic():
                agent = Agent.objects.filter(name=options["name"]).first()
                if agent is None:
                    agent = agent_create(actor=actor, name=options["name"], owner=self._owner(options["owner"]))
                    self.stderr.write(f"created agent {agent.name} (owner {agent.owner.get_username()})")
                elif not agent.is_active:
                    raise CommandError(f"agent {agent.name} is inactive; activate it in the admin first")
                issued = agent_token_issue(actor=actor, agent=agent, label=options["label"], expires_at=expires_at)
        except ApplicationError as exc:
            raise CommandError(exc.message) from None
        expiry = f"expires {expires_at:%Y-%m-%d %H:%M} UTC" if expires_at else "never expires"
        self.stderr.write(f"token {issued.row.prefix}… for agent {agent.name} ({expiry}); it is shown once:")
        self.stdout.write(issued.token)

    @staticmethod
    def _owner(username: str | None) -> Any:
        if not username:
            return default_owner()
        owner = get_user_model().objects.filter(username=username).first()
        if owner is None:
            raise CommandError(f"no user named {username!r}")
        return owner
