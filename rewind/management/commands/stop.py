"""``manage.py stop``: stop every guarded change (everywhere, of one agent, or to one VM), list the stops,
or lift one. A person's command: ``--by`` names who, for the audit log and every refused agent.

    manage.py stop --everywhere --reason "incident 4711" --by alice
    manage.py stop --agent fixer --reason "it loops" --by alice
    manage.py stop --vm db01 --reason "month-end close" --by alice
    manage.py stop --list
    manage.py stop --lift 3 --by bob --note "incident closed"
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from rewind.agents.models import Agent
from rewind.audit import Actor
from rewind.lib.errors import ApplicationError
from rewind.policy.models import StopSwitch
from rewind.policy.selectors import stop_get, stop_list
from rewind.policy.services import stop_engage, stop_lift


class Command(BaseCommand):
    help = "Stop every guarded change (everywhere, of one agent, or to one VM), list the stops, or lift one."

    def add_arguments(self, parser: CommandParser) -> None:
        what = parser.add_mutually_exclusive_group(required=True)
        what.add_argument("--everywhere", action="store_true", help="stop every agent's guarded changes")
        what.add_argument("--agent", help="stop this agent's guarded changes (its name)")
        what.add_argument("--vm", help="stop every guarded change to this VM (its name as Zerto shows it)")
        what.add_argument("--lift", type=int, metavar="ID", help="lift the stop with this id")
        what.add_argument("--list", action="store_true", help="list the stops in force")
        parser.add_argument("--reason", default="", help="why (every refused agent is told)")
        parser.add_argument("--note", default="", help="with --lift: a note")
        parser.add_argument("--by", default="", help="the person doing it (required to stop or lift)")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["list"]:
            stops = stop_list(in_force=True)
            for stop in stops:
                self.stdout.write(
                    f"#{stop.pk} {stop.what}: by {stop.stopped_by} at {stop.stopped_at:%Y-%m-%d %H:%M} UTC: {stop.reason}"
                )
            if not stops:
                self.stdout.write("no stop is in force")
            return
        if not options["by"].strip():
            raise CommandError("name yourself with --by: the audit log and every refused agent say who")
        actor = Actor.user(options["by"].strip())
        try:
            if options["lift"] is not None:
                found = stop_get(options["lift"])
                if found is None:
                    raise CommandError(f"there is no stop #{options['lift']}")
                lifted = stop_lift(actor=actor, stop=found, note=options["note"])
                self.stdout.write(f"lifted stop #{lifted.pk} {lifted.what}")
                return
            stop = self._engage(actor, options)
        except ApplicationError as exc:
            raise CommandError(exc.message) from None
        self.stdout.write(f"stop #{stop.pk}: every guarded change {stop.what} is refused until a person lifts it")

    def _engage(self, actor: Actor, options: dict[str, Any]) -> StopSwitch:
        if options["agent"]:
            agent = Agent.objects.filter(name=options["agent"]).first()
            if agent is None:
                raise CommandError(f"there is no agent {options['agent']!r}")
            return stop_engage(actor=actor, scope=StopSwitch.Scope.AGENT, agent_id=agent.pk, reason=options["reason"])
        if options["vm"]:
            return stop_engage(actor=actor, scope=StopSwitch.Scope.VM, vm=options["vm"], reason=options["reason"])
        return stop_engage(actor=actor, scope=StopSwitch.Scope.EVERYWHERE, reason=options["reason"])
