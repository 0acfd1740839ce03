"""An agent's VM limit: which VMs it may act on, judged on what a look-up found."""

from __future__ import annotations

import pytest

from rewind.agents.limits import VmLimit, lines


def test_no_limit_allows_every_vm() -> None:
    assert not VmLimit()
    assert VmLimit().outside(vm_name="anything", vpgs=["x"], sites=["y"]) is None
    assert VmLimit().describe() == "every VM"


@pytest.mark.parametrize(
    ("limit", "vm", "vpgs", "sites", "within"),
    [
        (VmLimit(vm_names=("web*",)), "WEB01", ["a"], ["s"], True),
        (VmLimit(vm_names=("web*", "db-0?")), "db-01", ["a"], ["s"], True),
        (VmLimit(vm_names=("web*",)), "db01", ["a"], ["s"], False),
        (VmLimit(vpgs=("Web VPG",)), "web01", ["web vpg"], ["s"], True),
        (VmLimit(vpgs=("Web VPG",)), "web01", ["Web VPG", "Other"], ["s"], False),  # every VPG must be allowed
        (VmLimit(sites=("Site A",)), "web01", ["a", "b"], ["Site A", "Site A"], True),
        (VmLimit(sites=("Site A",)), "web01", ["a"], ["Site B"], False),
        (VmLimit(vm_names=("web*",), sites=("Site A",)), "web01", ["a"], ["Site B"], False),  # each kind narrows
    ],
)
def test_each_kind_that_is_set_narrows_the_limit(
    limit: VmLimit, vm: str, vpgs: list[str], sites: list[str], within: bool
) -> None:
    assert (limit.outside(vm_name=vm, vpgs=vpgs, sites=sites) is None) is within


def test_the_reason_names_the_kind_that_failed() -> None:
    why = VmLimit(vpgs=("Web VPG",)).outside(vm_name="web01", vpgs=["Db VPG"], sites=[])
    assert why == "VPG Db VPG protects it, and the VPGs allowed are Web VPG"


def test_it_survives_the_token_claims_and_reads_fields_line_by_line() -> None:
    limit = VmLimit(vm_names=("web*",), sites=("Site A",))
    assert VmLimit.from_claim(limit.as_claim()) == limit
    assert VmLimit.from_claim(None) == VmLimit()
    assert lines(" web*\n\nweb*\r\ndb?  \n") == ("web*", "db?")
