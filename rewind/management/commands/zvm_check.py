from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from rewind.errors import NotFoundError
from rewind.sites import clock_skew_warning, site_availability_text, site_check
from rewind.sites.selectors import site_enabled_list, site_get_by_name


class Command(BaseCommand):
    help = "Log in to every enabled site's ZVM; print its identity and VPG count, or why it failed."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--site", help="check only the site with this name")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["site"]:
            try:
                sites = [site_get_by_name(options["site"])]
            except NotFoundError as exc:
                raise CommandError(exc.message) from None
        else:
            sites = list(site_enabled_list())
        if not sites:
            raise CommandError("no enabled sites are configured (add one in the admin under Sites)")
        failures = 0
        for site in sites:
            before = site_availability_text(site)
            result = site_check(site=site)
            if before.startswith("unavailable"):
                self.stdout.write(f"{site.name}: was {before}")
            if result.ok and result.local is not None:
                local = result.local
                self.stdout.write(
                    f"{site.name}: OK  {local.name} | type {local.type} | version {local.version} | "
                    f"identifier {local.identifier} | {result.vpg_count} VPGs | {_clock(site.clock_offset_s)} | "
                    f"{site_availability_text(result.site)}"
                )
            else:
                failures += 1
                self.stdout.write(f"{site.name}: FAILED  {result.error} | {site_availability_text(result.site)}")
        if failures:
            raise CommandError(f"{failures} of {len(sites)} sites failed")


def _clock(offset_s: float | None) -> str:
    if offset_s is None:
        return "clock not measured"
    text = f"clock {offset_s:+.1f} s from ours"
    warning = clock_skew_warning(offset_s)
    return f"{text} (WARNING: {warning})" if warning else text
