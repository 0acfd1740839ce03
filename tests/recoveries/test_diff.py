"""The approver's diff: lines that say what they are for text, sizes and sha256 for the rest."""

from __future__ import annotations

import hashlib

from recoveries.restore.diff import MAX_DIFF_BYTES, file_diff


def test_text_gets_a_unified_diff_whose_changing_lines_are_marked() -> None:
    diff = file_diff(b"a\nworker 4096\nc\n", b"a\nworker 768;\nc\n", current_name="now", recovered_name="then")
    assert diff.text
    assert not diff.identical
    kinds = [(line.kind, line.text) for line in diff.lines]
    assert ("head", "--- now") in kinds
    assert ("removed", "-worker 4096") in kinds
    assert ("added", "+worker 768;") in kinds
    assert ("same", " a") in kinds
    assert diff.changed_lines == 2
    assert diff.recovered_sha256 == hashlib.sha256(b"a\nworker 768;\nc\n").hexdigest()


def test_binary_and_oversized_files_get_sizes_and_sha256_only() -> None:
    binary = file_diff(b"\x00\x01", b"\xff\xfe", current_name="now", recovered_name="then")
    assert not binary.text
    assert binary.lines == []
    assert (binary.current_size, binary.recovered_size) == (2, 2)
    big = b"x\n" * (MAX_DIFF_BYTES // 2 + 1)
    large = file_diff(b"y\n", big, current_name="now", recovered_name="then")
    assert not large.text
    assert large.lines == []


def test_a_file_absent_from_the_guest_shows_every_line_as_coming_back() -> None:
    diff = file_diff(None, b"one\ntwo\n", current_name="(not read)", recovered_name="then")
    assert diff.current_size is None
    assert diff.current_sha256 == ""
    assert [line.text for line in diff.lines if line.kind == "added"] == ["+one", "+two"]
