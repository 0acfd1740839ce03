"""The demo's sites verify the simulator's certificate: ``demo_setup --ca-bundle`` pins its CA."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.core.management import call_command

from rewind.models import Site
from rewind.sites import site_connection

pytestmark = pytest.mark.django_db


def test_demo_setup_pins_the_simulators_ca_on_the_demo_sites(sim, capsys) -> None:
    assert sim.ca_bundle is not None
    call_command("demo_setup", sim_url=sim.url, ca_bundle=Path(sim.ca_bundle))

    out = capsys.readouterr().out
    assert "FAILED" not in out  # the check ran with verification on, and passed
    pem = Path(sim.ca_bundle).read_text(encoding="utf-8").strip()
    for site in Site.objects.all():
        assert site.ca_bundle == pem
        verify = site_connection(site).verify
        assert isinstance(verify, str)
        assert Path(verify).read_text(encoding="utf-8").strip() == pem


def test_demo_setup_pins_the_ca_on_sites_registered_before_without_one(sim) -> None:
    call_command("demo_setup", sim_url=sim.url)
    assert not Site.objects.exclude(ca_bundle="").exists()

    call_command("demo_setup", sim_url=sim.url, ca_bundle=Path(sim.ca_bundle))

    assert not Site.objects.filter(ca_bundle="").exists()
