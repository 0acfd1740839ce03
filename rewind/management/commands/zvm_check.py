from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from rewind.lib.errors import NotFoundError
from rewind.sites import SiteCheck, clock_skew_warning, site_availability_text, site_check_limit_s, sites_check
from rewind.sites.fanout import SiteOutcome
from rewind.sites.selectors import site_enabled_list, site_get_by_name


class Command(BaseCommand):
    _before: dict[int, str]
    help = (
        "Log in to every enabled site's ZVM; print its identity and VPG count, or why it failed. Sites are asked "
        "at once and each is printed as soon as it answers; a site marked unavailable is not asked (see --force)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--site", help="check only the site with this name")
        parser.add_argument(
            "--force",
            action="store_true",
            help="ask sites marked unavailable too, instead of saying since when at once (each waits up to the "
            "ZVM timeouts; an answer makes it available again)",
        )

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
        # What each site's circuit said before: a forced check of an unavailable site says it was.
        self._before = {site.pk: site_availability_text(site) for site in sites}
        outcomes = sites_check(sites=sites, force=options["force"], on_done=self._print)
        failures = sum(1 for o in outcomes if o.value is None or not o.value.ok)
        if failures:
            raise CommandError(f"{failures} of {len(sites)} sites failed")

    def _print(self, outcome: SiteOutcome[SiteCheck]) -> None:
        """One line per site, as soon as its check ends (a hung site holds back only its own line)."""
        name, result = outcome.site.name, outcome.value
        before = self._before.get(outcome.site.pk, "")
        if result is not None and result.asked and before.startswith("unavailable"):
            self.stdout.write(f"{name}: was {before}")
        if result is None:
            limit = site_check_limit_s()
            self.stdout.write(f"{name}: FAILED  no answer within {limit:g} s ({outcome.error})")
        elif not result.asked:
            self.stdout.write(f"{name}: UNAVAILABLE  {result.error}")
        elif result.ok and result.local is not None:
            local = result.local
            self.stdout.write(
                f"{name}: OK  {local.name} | type {local.type} | version {local.version} | "
                f"identifier {local.identifier} | {result.vpg_count} VPGs | {_clock(result.site.clock_offset_s)} | "
                f"{site_availability_text(result.site)}"
            )
        else:
            self.stdout.write(f"{name}: FAILED  {result.error} | {site_availability_text(result.site)}")


def _clock(offset_s: float | None) -> str:
    if offset_s is None:
        return "clock not measured"
    text = f"clock {offset_s:+.1f} s from ours"
    warning = clock_skew_warning(offset_s)
    return f"{text} (WARNING: {warning})" if warning else text
