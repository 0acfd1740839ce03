"""Properties of guest paths: whatever an agent sends is refused with a reason or read as one safe
absolute path, and the path read is the same whichever spelling of it was sent."""

from __future__ import annotations

import unicodedata

from hypothesis import given, settings
from hypothesis import strategies as st

from recoveries.paths import MAX_PATH_LENGTH, GuestPathError, parse_guest_path

segment = st.text(st.characters(exclude_characters="/\\"), min_size=1, max_size=12)
separators = st.sampled_from(["/", "\\", "//", "/./", "/../", "\\..\\"])


@st.composite
def path_like(draw: st.DrawFn) -> str:
    """Mostly path-shaped text: a root (or none), segments and separators of every kind, odd characters."""
    root = draw(st.sampled_from(["/", "C:\\", "c:/", "D:", "\\\\srv\\", "", " /", "../"]))
    parts = draw(st.lists(st.one_of(segment, st.sampled_from(["..", ".", "", "a\x00b", "x\u202ey", " "])), max_size=6))
    seps = draw(st.lists(separators, min_size=len(parts), max_size=len(parts)))
    return root + "".join(p + s for p, s in zip(parts, seps, strict=True)) + draw(st.sampled_from(["", "f", "/"]))


@settings(max_examples=1500, deadline=None)
@given(raw=st.one_of(path_like(), st.text(max_size=60)))
def test_a_path_is_refused_or_read_as_one_safe_absolute_path(raw: str) -> None:
    try:
        guest = parse_guest_path(raw)
    except GuestPathError:
        return
    assert guest.segments
    for seg in guest.segments:
        assert seg not in ("", ".", "..")
        assert "/" not in seg
        assert guest.os == "windows" or "\\" not in seg
        assert not any(unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Zl", "Zp") for ch in seg)
    assert guest.normalized.startswith("/" if guest.os == "linux" else f"{guest.drive}/")
    assert len(guest.normalized) <= MAX_PATH_LENGTH + 2
    # The normalized spelling reads back as the same path: one file, one spelling.
    again = parse_guest_path(guest.normalized)
    assert (again.os, again.drive, again.segments) == (guest.os, guest.drive, guest.segments)
    assert again.relative == guest.relative
