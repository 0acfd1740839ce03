"""RFC 8785, the JSON Canonicalization Scheme (JCS): one byte string for one JSON value.

A held call is bound to the SHA-256 of its arguments in this form, so the approval covers exactly
those values however the agent's JSON spelled them (key order, spacing, ``1.0`` or ``1``, escapes).

The rules, as RFC 8785 states them:
- objects: members sorted by their names compared as arrays of UTF-16 code units (section 3.2.3),
  no whitespace anywhere;
- strings: as ECMAScript's ``JSON.stringify`` writes them: ``"`` and ``\\`` escaped, the control
  characters U+0000-U+001F as ``\\b \\t \\n \\f \\r`` or ``\\u00xx`` (lower-case hex), every other
  character as itself, in UTF-8; a lone surrogate is not valid (I-JSON), and is refused;
- numbers: IEEE 754 doubles written as ECMAScript's ``Number.prototype.toString`` does (the
  shortest form that reads back to the same double, exponent from 1e21 up and below 1e-6);
  NaN and the infinities are refused; an integer beyond 2**53 is refused rather than rounded,
  since two different integers would then have the same digest;
- ``true``, ``false``, ``null`` as they are.
"""

from __future__ import annotations

import hashlib
import math
from typing import Any

# Integers up to this magnitude are exact doubles (I-JSON, RFC 7493 section 2.2).
MAX_EXACT_INT = 2**53


class CanonicalizationError(ValueError):
    """The value has no RFC 8785 form (NaN, an infinity, an inexact integer, a lone surrogate, a non-JSON type)."""


_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}


def _string(text: str) -> str:
    out = ['"']
    for char in text:
        if char in _ESCAPES:
            out.append(_ESCAPES[char])
        elif char < " ":
            out.append(f"\\u{ord(char):04x}")
        elif "\ud800" <= char <= "\udfff":
            raise CanonicalizationError("a string holds a lone UTF-16 surrogate, which no JSON text may carry")
        else:
            out.append(char)
    out.append('"')
    return "".join(out)


def number(value: float) -> str:
    """``value`` as ECMAScript's ``Number.prototype.toString`` writes it (RFC 8785 section 3.2.2.3)."""
    if math.isnan(value) or math.isinf(value):
        raise CanonicalizationError("NaN and the infinities have no JSON form")
    if value == 0:
        return "0"  # -0 too
    sign = "-" if value < 0 else ""
    # repr gives the shortest digits that read back to the same double, as ECMAScript requires.
    mantissa, _, exp = repr(abs(value)).partition("e")
    whole, _, fraction = mantissa.partition(".")
    digits = (whole + fraction).lstrip("0")
    # n: where the decimal point sits relative to the digits (ECMAScript's n in 10**(n-k)).
    # A whole part of "0" holds no digit; the fraction's leading zeros move the point left.
    leading = len(whole) if whole != "0" else -(len(fraction) - len(fraction.lstrip("0")))
    point = leading + (int(exp) if exp else 0)
    digits = digits.rstrip("0") or "0"
    k = len(digits)
    if k <= point <= 21:
        return sign + digits + "0" * (point - k)
    if 0 < point <= 21:
        return sign + digits[:point] + "." + digits[point:]
    if -6 < point <= 0:
        return sign + "0." + "0" * -point + digits
    exponent = point - 1
    head = digits[0] + ("." + digits[1:] if k > 1 else "")
    return f"{sign}{head}e{'+' if exponent > 0 else '-'}{abs(exponent)}"


def _sort_key(name: str) -> bytes:
    # Big-endian UTF-16 bytes compare exactly as their code units do.
    try:
        return name.encode("utf-16-be")
    except UnicodeEncodeError:
        raise CanonicalizationError("a member name holds a lone UTF-16 surrogate") from None


def _write(value: Any, out: list[str]) -> None:
    if value is None:
        out.append("null")
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif isinstance(value, int):
        if abs(value) > MAX_EXACT_INT:
            raise CanonicalizationError(
                f"the integer {value} is beyond 2**53: as a JSON number it cannot be bound exactly; send it as a string"
            )
        out.append(number(float(value)))
    elif isinstance(value, float):
        out.append(number(value))
    elif isinstance(value, str):
        out.append(_string(value))
    elif isinstance(value, (list, tuple)):
        out.append("[")
        for i, item in enumerate(value):
            if i:
                out.append(",")
            _write(item, out)
        out.append("]")
    elif isinstance(value, dict):
        if not all(isinstance(k, str) for k in value):
            raise CanonicalizationError("object member names must be strings")
        out.append("{")
        for i, key in enumerate(sorted(value, key=_sort_key)):
            if i:
                out.append(",")
            out.append(_string(key))
            out.append(":")
            _write(value[key], out)
        out.append("}")
    else:
        raise CanonicalizationError(f"a {type(value).__name__} is not a JSON value")


def canonicalize(value: Any) -> bytes:
    """The RFC 8785 form of ``value`` (parsed JSON: dict, list, str, int, float, bool, None), in UTF-8.

    Raises ``CanonicalizationError`` when it has none."""
    out: list[str] = []
    _write(value, out)
    try:
        return "".join(out).encode("utf-8")
    except UnicodeEncodeError:
        raise CanonicalizationError("a string holds a lone UTF-16 surrogate") from None


def digest(value: Any) -> str:
    """The SHA-256 (hex) of ``value``'s RFC 8785 form: what an approval is bound to."""
    return hashlib.sha256(canonicalize(value)).hexdigest()
