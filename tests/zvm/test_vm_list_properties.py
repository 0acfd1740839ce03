"""Property of a site's whole VM list (``VmList``): each row, and each key an index reads from it
(name, identifier, addresses), is what ``VmRow.from_json`` makes of the row as the ZVM sent it,
whatever the case of its keys, whichever fields are missing, null, mistyped or under their 7.x
names, and whatever else the row holds."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from rewind.zvm import VmList, VmRow
from tests.sizes import cases

NAMES = (
    "VmIdentifier",
    "VmName",
    "VpgIdentifier",
    "VpgName",
    "ProtectedSite",
    "RecoverySite",
    "ProtectedSiteName",
    "RecoverySiteName",
    "SourceSite",
    "TargetSite",
    "Status",
    "SubStatus",
    "EnabledActions",
    "VmNetworkInformation",
    "Link",
    "GuestOs",
    "ActualRPO",
)

text = st.text(alphabet="ab.-?=vm0123456789VpgIdentifier", max_size=24)
scalar = st.one_of(st.none(), st.booleans(), st.integers(-2, 5), st.floats(allow_nan=False, allow_infinity=False), text)
set_scalar = st.one_of(st.booleans(), st.integers(-2, 5), text)
site_link = st.fixed_dictionaries(
    {}, optional={"identifier": scalar, "type": st.sampled_from(["LocalSiteApi", "PeerSiteApi", "localsiteapi"])}
)
network = st.fixed_dictionaries(
    {},
    optional={
        "NetworkAdapters": st.one_of(
            scalar, st.lists(st.fixed_dictionaries({}, optional={"IpAddresses": st.lists(scalar, max_size=3)}))
        )
    },
)
link = st.fixed_dictionaries({}, optional={"identifier": scalar, "vpg_identifier": scalar})
flags = st.fixed_dictionaries({}, optional={"IsFlrEnabled": st.one_of(scalar, st.sampled_from(["true", "False"]))})
objects = {
    "ProtectedSite": site_link,
    "RecoverySite": site_link,
    "VmNetworkInformation": network,
    "Link": link,
    "EnabledActions": flags,
}
value_of = {name: st.one_of(scalar, value) for name, value in objects.items()}
set_value_of = {name: st.one_of(set_scalar, value) for name, value in objects.items()}


@st.composite
def rows(draw: st.DrawFn) -> Any:
    if draw(st.integers(0, 9)) == 0:
        return draw(scalar)  # not an object at all
    as_written = draw(st.booleans())  # every name as ZVM 10.x writes it, as a real list mostly is
    row: dict[str, Any] = {}
    for name in NAMES:
        if draw(st.integers(0, 15 if as_written else 5)) == 0:
            continue  # missing
        spelled = name
        if not as_written:
            spelled = draw(st.sampled_from([name, name.lower(), name.upper(), name[0].lower() + name[1:]]))
        row[spelled] = draw(set_value_of.get(name, set_scalar) if as_written else value_of.get(name, scalar))
    return row


@settings(max_examples=cases("REWIND_PROPERTY_EXAMPLES", full=400, quick=100), deadline=None)
@given(raw=st.lists(rows(), max_size=6))
def test_each_row_and_key_of_a_whole_list_is_what_the_row_parser_reads(raw: list[Any]) -> None:
    listed = VmList(raw)
    expected = [VmRow.from_json(row) for row in raw]
    assert len(listed) == len(expected)
    for i, row in enumerate(expected):
        assert listed.name_at(i) == row.vm_name
        assert listed.identifier_at(i) == row.vm_identifier
        assert listed.ip_addresses_at(i) == row.ip_addresses
    assert list(listed) == expected
