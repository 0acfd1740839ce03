"""Download links (quoted, relative, absolute, under a path prefix) and zip/raw streaming."""

from __future__ import annotations

import hashlib
import io
import zipfile
from collections.abc import Iterator

import pytest

from rewind.zvm.download import NotOneFile, clean_link, resolve_link, same_origin, stream_to_sink

ROOT = "https://127.0.0.1:8443/site-a"


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ('"v1/downloads/x.y"', "v1/downloads/x.y"),
        ("  '\"v1/downloads/x.y\"'  ", "v1/downloads/x.y"),
        ("https://h/v1/d", "https://h/v1/d"),
    ],
)
def test_it_strips_quotes_around_links(raw: str, expected: str) -> None:
    assert clean_link(raw) == expected


@pytest.mark.parametrize(
    ("root", "link", "expected"),
    [
        (ROOT, "v1/downloads/d1", f"{ROOT}/v1/downloads/d1"),
        (ROOT, "/v1/downloads/d1", f"{ROOT}/v1/downloads/d1"),
        (ROOT, "/site-a/v1/downloads/d1", f"{ROOT}/v1/downloads/d1"),
        (ROOT + "/", "v1/downloads/d1?t=1", f"{ROOT}/v1/downloads/d1?t=1"),
        (ROOT, "/site-ab/v1/d", f"{ROOT}/site-ab/v1/d"),
        ("https://zvm", "v1/downloads/d1", "https://zvm/v1/downloads/d1"),
        ("https://zvm", "/v1/downloads/d1", "https://zvm/v1/downloads/d1"),
        (ROOT, "https://other:9/v1/downloads/d1", "https://other:9/v1/downloads/d1"),
        (ROOT, "//other/v1/d", "https://other/v1/d"),
    ],
)
def test_it_resolves_links_against_a_base_with_a_path_prefix(root: str, link: str, expected: str) -> None:
    assert resolve_link(root, link) == expected


def test_it_sends_the_token_only_to_the_same_origin() -> None:
    assert same_origin(f"{ROOT}/v1/downloads/d", ROOT)
    assert not same_origin("https://127.0.0.1:9999/site-a/v1/downloads/d", ROOT)
    assert not same_origin("http://127.0.0.1:8443/site-a/v1/downloads/d", ROOT)


def _chunks(data: bytes, size: int = 3) -> Iterator[bytes]:
    return (data[i : i + size] for i in range(0, len(data), size))


def _zip(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return buf.getvalue()


def test_it_copies_a_raw_file_with_its_sha256() -> None:
    data = b"server { listen 80; }\n" * 100
    sink = io.BytesIO()
    result = stream_to_sink(_chunks(data), "application/octet-stream", "/etc/nginx/nginx.conf", sink, 64)
    assert sink.getvalue() == data
    assert (result.size, result.sha256, result.zipped) == (len(data), hashlib.sha256(data).hexdigest(), False)


def test_it_copies_an_empty_file() -> None:
    sink = io.BytesIO()
    result = stream_to_sink(iter([]), "", "empty", sink, 64)
    assert (result.size, result.sha256, sink.getvalue()) == (0, hashlib.sha256(b"").hexdigest(), b"")


@pytest.mark.parametrize("content_type", ["application/zip", "application/octet-stream"])
def test_it_unwraps_the_single_member_of_a_wrapper_zip(content_type: str) -> None:
    data = b"x" * 5000
    sink = io.BytesIO()
    result = stream_to_sink(_chunks(_zip({"nginx.conf": data}), 100), content_type, "etc/nginx/nginx.conf", sink, 256)
    assert sink.getvalue() == data
    assert (result.size, result.sha256, result.zipped, result.member_name) == (
        len(data),
        hashlib.sha256(data).hexdigest(),
        True,
        "nginx.conf",
    )


def test_it_keeps_a_requested_file_that_is_itself_a_zip() -> None:
    # A user's backup.zip served raw: the magic bytes alone must not make us unpack it.
    data = _zip({"inner.txt": b"hello"})
    sink = io.BytesIO()
    result = stream_to_sink(_chunks(data), "application/octet-stream", "/home/u/backup.zip", sink, 64)
    assert sink.getvalue() == data
    assert not result.zipped


def test_it_refuses_a_declared_zip_with_several_files() -> None:
    with pytest.raises(NotOneFile, match="holding 2 files"):
        stream_to_sink(_chunks(_zip({"a": b"1", "b": b"2"})), "application/zip", "a", io.BytesIO(), 64)


def test_it_refuses_a_declared_zip_that_is_not_one() -> None:
    with pytest.raises(zipfile.BadZipFile):
        stream_to_sink(_chunks(b"PK\x03\x04 garbage"), "application/zip", "a", io.BytesIO(), 64)
