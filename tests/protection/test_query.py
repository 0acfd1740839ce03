"""What a VM query may be: refused before any ZVM is asked when it can name no VM."""

from __future__ import annotations

import re

import pytest

from rewind.protection.query import VmQueryError, check_vm_query


@pytest.mark.parametrize(
    "query",
    ["web01", " web01 ", "web01.example.com", "10.0.0.5", "fe80::1", "Web Server 01", "vm-7.srv", "naïve-vm", "a..b"],
)
def test_it_takes_what_names_a_vm(query: str) -> None:
    assert check_vm_query(query) == query.strip()


@pytest.mark.parametrize(
    ("query", "says"),
    [
        ("", "give a VM name"),
        ("   ", "give a VM name"),
        ("x" * 256, "too long"),
        ("web01\x00", "U+0000"),
        ("web\u202e10", "U+202E"),
        ("web\u200b01", "U+200B"),
        ("web\ud80001", "U+D800"),
        ("web\u2028x", "U+2028"),
        ("../../etc", "not a path"),
        ("..\\windows", "not a path"),
        ("..", "not a path"),
        ("web01,web02", "not a list"),
        ("web01;db01", "not a list"),
    ],
)
def test_it_refuses_what_can_name_no_vm(query: str, says: str) -> None:
    with pytest.raises(VmQueryError, match=re.escape(says)):
        check_vm_query(query)
