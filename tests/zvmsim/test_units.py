"""The simulator's building blocks without HTTP: dates, generated content, zip streams, guest trees."""

from __future__ import annotations

import io
import struct
import zipfile
import zlib
from pathlib import Path

import pytest

from zvmsim.content import BytesContent, GeneratedContent
from zvmsim.guestfs import FsPathError
from zvmsim.ids import DateFormatError, parse_date
from zvmsim.trees import build_tree
from zvmsim.zipstream import Member, zip_chunks, zip_length


@pytest.mark.parametrize(
    "text",
    [
        "2025-03-01T10:15:42.000Z",
        "2025-03-01T10:15:42Z",
        "2025-03-01T10:15:42",
        "2025-03-01T10:15Z",
        "2025-03-01T10Z",
        "2025-03-01",
        "2025-03",
        "2025",
        "2025-03-01T12:15:42+02:00",
        "2025-03-01T12:15:42 02:00",
    ],
)
def test_it_parses_every_zvm_date_format(text: str) -> None:
    expected = {4: 1735689600.0, 7: 1740787200.0, 10: 1740787200.0}
    value = parse_date(text)
    if len(text) in expected:
        assert value == expected[len(text)]
    else:
        assert 1740787200.0 <= value <= 1740824142.0


def test_it_rejects_other_dates() -> None:
    for text in ("yesterday", "2025-13-01", "01/03/2025", ""):
        with pytest.raises(DateFormatError):
            parse_date(text)


def test_generated_content_is_deterministic_and_sized() -> None:
    content = GeneratedContent(3 * (1 << 20) + 5, seed=9)
    chunks = list(content.chunks())
    assert sum(len(c) for c in chunks) == content.size
    assert b"".join(chunks) == b"".join(GeneratedContent(content.size, 9).chunks())
    assert b"".join(chunks) != b"".join(GeneratedContent(content.size, 10).chunks())
    assert len(set(chunks[:3])) == 3  # blocks differ from one another
    assert content.crc32() == zlib.crc32(b"".join(chunks))


def test_a_stored_zip_stream_is_read_by_zipfile() -> None:
    members = [
        Member("a/b.txt", BytesContent(b"hello\n"), zlib.crc32(b"hello\n"), 1.7e9),
        Member("big.bin", GeneratedContent(70_000, 3), GeneratedContent(70_000, 3).crc32(), 1.7e9),
    ]
    data = b"".join(zip_chunks(members))
    assert len(data) == zip_length(members)
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        assert zf.testzip() is None
        assert zf.read("a/b.txt") == b"hello\n"
        assert zf.read("big.bin") == b"".join(GeneratedContent(70_000, 3).chunks())


def test_members_past_4_gib_get_zip64_records(tmp_path: Path) -> None:
    size = 5 * (1 << 30)
    members = [
        # Generated content makes its bytes only when read, which this test never does: only the
        # size matters to the zip layout.
        Member("huge.img", GeneratedContent(size, 0), 0x12345678, 1.7e9),
        Member("after.txt", BytesContent(b"x"), zlib.crc32(b"x"), 1.7e9),
    ]
    out = tmp_path / "sparse.zip"
    with out.open("wb") as fh:  # a sparse file: headers written, the 5 GiB skipped
        from zvmsim.zipstream import _layout, _local_header

        _, tail = _layout(members)
        header = _local_header(members[0])
        fh.write(header)
        fh.seek(len(header) + size)
        fh.write(_local_header(members[1]) + b"x" + tail)
    assert out.stat().st_size == zip_length(members)
    sig, _ver, _flags, _method, _t, _d, _crc, csize, usize, nlen, xlen = struct.unpack("<IHHHHHIIIHH", header[:30])
    assert (sig, csize, usize) == (0x04034B50, 0xFFFFFFFF, 0xFFFFFFFF)
    assert struct.unpack("<HHQQ", header[30 + nlen : 30 + nlen + xlen]) == (1, 16, size, size)
    with zipfile.ZipFile(out) as zf:
        huge, after = zf.infolist()
        assert (huge.file_size, huge.CRC) == (size, 0x12345678)
        assert after.header_offset > 0xFFFFFFFF
        assert zf.read("after.txt") == b"x"


def test_a_snapshot_does_not_see_later_writes() -> None:
    fs = build_tree("web01", "web01", "10.0.0.11", 1, 0.0)
    before = fs.snapshot()
    fs.write("/etc/nginx/nginx.conf", BytesContent(b"new"), 5.0)
    old = before.entry("partition#2 Ext4/etc/nginx/nginx.conf").node
    new = fs.entry("partition#2 Ext4/etc/nginx/nginx.conf").node
    assert old is not None
    assert new is not None
    assert b"".join(old.content.chunks()) != b"new"
    assert b"".join(new.content.chunks()) == b"new"
    fs.delete("/etc/hostname")
    assert before.entry("partition#2 Ext4/etc/hostname").kind == "File"


def test_guest_paths_map_to_partitions() -> None:
    linux = build_tree("web01", "web01", "10.0.0.11", 1, 0.0)
    assert linux.guest_to_flr("/boot/grub/grub.cfg") == "partition#1 Ext4/grub/grub.cfg"
    assert linux.guest_to_flr("/etc/nginx/nginx.conf") == "partition#2 Ext4/etc/nginx/nginx.conf"
    assert linux.guest_to_flr("/bootstrap.sh") == "partition#2 Ext4/bootstrap.sh"
    windows = build_tree("win01", "win01", "10.0.0.21", 1, 0.0)
    assert windows.guest_to_flr("C:\\inetpub\\web.config") == "partition#2 NTFS/inetpub/web.config"
    assert windows.guest_to_flr("d:/data/report.csv") == "partition#3 NTFS/data/report.csv"
    assert windows.guest_to_flr("partition#1 NTFS/bootmgr") == "partition#1 NTFS/bootmgr"
    # NTFS looks names up regardless of case and answers with the stored spelling.
    assert windows.entry("partition#2 NTFS/INETPUB/Web.Config").path == "partition#2 NTFS/inetpub/web.config"
    with pytest.raises(FsPathError):
        linux.entry("partition#2 Ext4/ETC/hostname")
    with pytest.raises(FsPathError):
        windows.guest_to_flr("E:\\nothing")
