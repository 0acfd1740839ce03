"""The shared fixtures (tests.fixtures) as every package sees them."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User

from rewind.sites.models import Site
from tests.fixtures import People


@pytest.mark.sites("site-b")
def test_the_sites_marker_registers_only_the_sites_it_names(sites: dict[str, Site]) -> None:
    assert list(sites) == ["site-b"]
    assert sites["site-b"].name == "Site B"
    assert sites["site-b"].identifier, "the check learned the ZVM's identity"
    assert Site.objects.count() == 1


def test_without_the_marker_all_three_sites_are_registered(sites: dict[str, Site]) -> None:
    assert {slug: site.name for slug, site in sites.items()} == {
        "site-a": "Site A",
        "site-b": "Site B",
        "site-c": "Site C",
    }


def test_the_personas_hold_the_permissions_their_role_says(people: People, viewer: User, superuser: User) -> None:
    assert people.approver.has_perm("recoveries.approve_recovery")
    assert people.owner.has_perm("recoveries.approve_recovery")
    assert not people.outsider.has_perm("recoveries.approve_recovery")
    assert people.outsider.is_staff
    assert viewer.has_perm("rewind.view_auditevent")
    assert not viewer.has_perm("recoveries.approve_recovery")
    assert superuser.is_superuser
