"""RFC 8785 (JCS): the RFC's own examples, byte for byte, and what has no canonical form."""

from __future__ import annotations

import json
import struct

import pytest

from rewind.approvals.jcs import CanonicalizationError, canonicalize, digest, number

# RFC 8785 appendix B: IEEE 754 doubles (as hex) and how ECMAScript, and so JCS, writes them.
NUMBERS = {
    "0000000000000000": "0",
    "8000000000000000": "0",
    "0000000000000001": "5e-324",
    "8000000000000001": "-5e-324",
    "7fefffffffffffff": "1.7976931348623157e+308",
    "ffefffffffffffff": "-1.7976931348623157e+308",
    "4340000000000000": "9007199254740992",
    "c340000000000000": "-9007199254740992",
    "4430000000000000": "295147905179352830000",
    "44b52d02c7e14af5": "9.999999999999997e+22",
    "44b52d02c7e14af6": "1e+23",
    "44b52d02c7e14af7": "1.0000000000000001e+23",
    "444b1ae4d6e2ef4e": "999999999999999700000",
    "444b1ae4d6e2ef4f": "999999999999999900000",
    "444b1ae4d6e2ef50": "1e+21",
    "3eb0c6f7a0b5ed8c": "9.999999999999997e-7",
    "3eb0c6f7a0b5ed8d": "0.000001",
    "41b3de4355555553": "333333333.3333332",
    "41b3de4355555554": "333333333.33333325",
    "41b3de4355555555": "333333333.3333333",
    "41b3de4355555556": "333333333.3333334",
    "41b3de4355555557": "333333333.33333343",
    "becbf647612f3696": "-0.0000033333333333333333",
    "43143ff3c1cb0959": "1424953923781206.2",
}


@pytest.mark.parametrize(("bits", "expected"), sorted(NUMBERS.items()))
def test_it_writes_the_rfcs_numbers_as_ecmascript_does(bits: str, expected: str) -> None:
    (value,) = struct.unpack(">d", bytes.fromhex(bits))
    assert number(value) == expected


def test_it_writes_the_rfcs_main_example_byte_for_byte() -> None:
    # RFC 8785 section 3.2.2: whitespace, number forms and string escapes as the input spelled them.
    source = (
        '{"numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001], '
        r'"string": "\u20ac$\u000F\u000aA'
        "'"
        r'\u0042\u0022\u005c\\\"\/", "literals": [null, true, false]}'
    )
    expected = (
        '{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],'
        '"string":"€$\\u000f\\nA\'B\\"\\\\\\\\\\"/"}'
    )
    assert canonicalize(json.loads(source)).decode("utf-8") == expected


def test_it_sorts_member_names_by_their_utf16_code_units() -> None:
    # RFC 8785 section 3.2.3: an emoji (a surrogate pair) sorts before U+FB33, though its code point is higher.
    source = {
        "\u20ac": "Euro Sign",
        "\r": "Carriage Return",
        "\ufb33": "Hebrew Letter Dalet With Dagesh",
        "1": "One",
        "\U0001f600": "Emoji: Grinning Face",
        "\u0080": "Control",
        "\u00f6": "Latin Small Letter O With Diaeresis",
    }
    keys = list(json.loads(canonicalize(source)))
    assert keys == ["\r", "1", "\u0080", "\u00f6", "\u20ac", "\U0001f600", "\ufb33"]


def test_the_same_value_spelled_otherwise_has_the_same_digest() -> None:
    a = json.loads('{"b": [1.0, 2.50, "x"], "a": {"z": null, "y": true}}')
    b = json.loads('{ "a" : { "y":true,"z":null }, "b":[1,2.5,"\\u0078"] }')
    assert digest(a) == digest(b)
    assert digest(a) != digest({**a, "b": [1, 2.5, "y"]})


@pytest.mark.parametrize(
    "value",
    [float("nan"), float("inf"), -float("inf"), 2**53 + 1, "\ud800", {"\udc00": 1}, {1: "x"}, {"set": {1, 2}}],
)
def test_a_value_with_no_canonical_form_is_refused(value: object) -> None:
    with pytest.raises(CanonicalizationError):
        canonicalize(value)


def test_integers_up_to_two_to_the_53_are_exact() -> None:
    assert canonicalize([2**53, -(2**53), 10, -0]) == b"[9007199254740992,-9007199254740992,10,0]"
