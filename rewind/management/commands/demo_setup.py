from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.core.management.base import BaseCommand, CommandParser
from django.db.models import Q

from rewind.audit import Actor
from rewind.sites import site_register

DEMO_SITES = (("Site A", "site-a"), ("Site B", "site-b"))
DEMO_ZVM_USER = "admin"
DEMO_ZVM_PASSWORD = "zvmsim-Passw0rd-7c1e-4b9d"


_APPROVER_PERMISSIONS = Q(
    content_type__app_label="recoveries", codename__in=["approve_recovery", "view_recoveryrequest", "view_flrsession"]
) | Q(content_type__app_label="rewind", codename__in=["approve_heldcall", "view_heldcall", "view_stopswitch"])


class Command(BaseCommand):
    help = "Create the demo admin and register the simulator's two demo sites (safe to run again)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--sim-url", required=True, help="simulator root, e.g. https://127.0.0.1:9443")
        parser.add_argument(
            "--ca-bundle",
            type=Path,
            help="the simulator's CA certificate (its ca.pem): pinned on the demo sites, so their TLS is verified",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        username, password = self._demo_user("admin", superuser=True)
        self.stdout.write(f"Demo admin:    username {username}  password {password}")
        # Agents created with createagent belong to the first superuser, who may not approve
        # their recoveries; a second person does.
        username, password = self._demo_user("approver", superuser=False)
        self.stdout.write(f"Demo approver: username {username}  password {password}  (approves file recoveries)")
        actor = Actor.system("demo_setup")
        # The simulator's certificate is its own CA's, not a public one: pinned, it is verified like
        # any other, and no call to the demo sites goes out unverified.
        ca_bundle = options["ca_bundle"].read_text(encoding="utf-8") if options["ca_bundle"] else None
        for name, slug in DEMO_SITES:
            base_url = f"{options['sim_url'].rstrip('/')}/{slug}"
            result = site_register(
                actor=actor,
                name=name,
                base_url=base_url,
                username=DEMO_ZVM_USER,
                password=DEMO_ZVM_PASSWORD,
                ca_bundle=ca_bundle,
            )
            status = f"{result.vpg_count} VPGs" if result.ok else f"FAILED: {result.error}"
            self.stdout.write(f"{name} at {base_url}: {status}")

    def _demo_user(self, username: str, *, superuser: bool) -> tuple[str, str]:
        """A demo person; the password is generated once and kept under VAR_DIR."""
        path = settings.VAR_DIR / f"demo-{username}-password"
        if not path.exists():
            path.touch(mode=0o600)
            path.write_text(secrets.token_urlsafe(12), encoding="utf-8")
        password = path.read_text(encoding="utf-8").strip()
        user_model = get_user_model()
        user = user_model.objects.filter(username=username).first()
        if user is None:
            if superuser:
                user_model.objects.create_superuser(username, f"{username}@example.com", password)
            else:
                user = user_model.objects.create_user(username, f"{username}@example.com", password, is_staff=True)
        elif not user.check_password(password):
            # Someone changed it by hand; say so rather than resetting it behind their back.
            return username, "(changed since first run; not shown)"
        if user is not None and not superuser:
            # What the approver decides; added on every run, so an approver made before a permission existed gets it.
            user.user_permissions.add(*Permission.objects.filter(_APPROVER_PERMISSIONS))
        return username, password
