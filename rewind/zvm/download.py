"""FLR download helpers: resolving the link the ZVM hands out, and streaming its bytes.

Both the link (relative or absolute, quoted or not) and the payload (the file, or a zip holding it) are
undocumented. Memory stays constant: a zip is spooled to a temporary file, since its directory comes last.
"""

from __future__ import annotations

import hashlib
import posixpath
import tempfile
import zipfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import BinaryIO
from urllib.parse import urlsplit, urlunsplit

from .types import DownloadResult

ZIP_MAGIC = b"PK\x03\x04"
ZIP_TYPES = {"application/zip", "application/x-zip-compressed", "application/x-zip"}


class NotOneFile(Exception):
    """The zip does not hold exactly one file (carries a plain-words reason)."""


def clean_link(raw: str) -> str:
    """Strip whitespace and any quoting the ZVM left around the link (``"v1/..."``)."""
    link = raw.strip()
    while len(link) >= 2 and link[0] == link[-1] and link[0] in "\"'":
        link = link[1:-1].strip()
    return link


def resolve_link(root: str, link: str) -> str:
    """Make ``link`` absolute against the site's base URL ``root``, which may carry a path prefix: a relative link
    (leading slash or not) is under the prefix, and a link already starting with it is not prefixed twice."""
    parts = urlsplit(link)
    if parts.scheme and parts.netloc:
        return link
    base = urlsplit(root)
    if link.startswith("//"):
        return f"{base.scheme}:{link}"
    path = "/" + parts.path.lstrip("/")
    prefix = base.path.rstrip("/")
    if prefix and not (path == prefix or path.startswith(prefix + "/")):
        path = prefix + path
    return urlunsplit((base.scheme, base.netloc, path, parts.query, parts.fragment))


def same_origin(url: str, root: str) -> bool:
    a, b = urlsplit(url), urlsplit(root)
    return (a.scheme, a.hostname, a.port) == (b.scheme, b.hostname, b.port)


@dataclass
class _Written:
    size: int
    sha256: str


def _copy(chunks: Iterable[bytes], sink: BinaryIO) -> _Written:
    digest, size = hashlib.sha256(), 0
    for chunk in chunks:
        if chunk:
            sink.write(chunk)
            digest.update(chunk)
            size += len(chunk)
    return _Written(size=size, sha256=digest.hexdigest())


def _peek(chunks: Iterator[bytes], want: int) -> bytes:
    """Collect at least ``want`` bytes (or all there is) from the head of ``chunks``."""
    head = b""
    for chunk in chunks:
        head += chunk
        if len(head) >= want:
            break
    return head


def _only_member(archive: zipfile.ZipFile) -> zipfile.ZipInfo:
    files = [info for info in archive.infolist() if not info.is_dir()]
    if len(files) != 1:
        raise NotOneFile(f"the download is a zip holding {len(files)} files, expected one")
    return files[0]


def _is_wrapper(member: zipfile.ZipInfo, requested: str, declared_zip: bool) -> bool:
    # Sniffing PK\x03\x04 alone cannot tell the ZVM's wrapper zip from a requested file
    # that is itself a zip (.zip, .docx, .jar). Unwrap only when the server said zip, or
    # when the single member carries the requested file's name.
    if declared_zip:
        return True
    wanted = posixpath.basename(requested.replace("\\", "/").rstrip("/")).lower()
    return posixpath.basename(member.filename.rstrip("/")).lower() == wanted


def stream_to_sink(
    chunks: Iterator[bytes],
    content_type: str,
    requested_path: str,
    sink: BinaryIO,
    chunk_size: int,
) -> DownloadResult:
    """Write the file's own bytes to ``sink``, a wrapper zip unpacked on the way; raises ``NotOneFile`` or
    ``zipfile.BadZipFile`` for a declared zip that is unusable."""
    declared_zip = content_type.split(";")[0].strip().lower() in ZIP_TYPES
    head = _peek(chunks, len(ZIP_MAGIC))
    if not declared_zip and not head.startswith(ZIP_MAGIC):
        written = _copy(_chain(head, chunks), sink)
        return DownloadResult(written.size, written.sha256, zipped=False)
    with tempfile.SpooledTemporaryFile(max_size=chunk_size) as spool:
        _copy(_chain(head, chunks), spool)  # type: ignore[arg-type]
        spool.seek(0)
        try:
            archive = zipfile.ZipFile(spool)
            member = _only_member(archive)
        except (zipfile.BadZipFile, NotOneFile):
            if declared_zip:
                raise
            archive, member = None, None
        if archive is None or member is None or not _is_wrapper(member, requested_path, declared_zip):
            spool.seek(0)  # a file that merely looks like a zip: hand it over as it is
            written = _copy(iter(lambda: spool.read(chunk_size), b""), sink)
            return DownloadResult(written.size, written.sha256, zipped=False)
        with archive, archive.open(member) as source:
            written = _copy(iter(lambda: source.read(chunk_size), b""), sink)
        return DownloadResult(written.size, written.sha256, zipped=True, member_name=member.filename)


def _chain(head: bytes, rest: Iterator[bytes]) -> Iterator[bytes]:
    yield head
    yield from rest
