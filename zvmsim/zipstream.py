"""A stored (uncompressed) zip written as a stream, ZIP64 when sizes or offsets need it.

CRCs are known before streaming (computed in a worker thread), so every local header carries
the real CRC and sizes: any reader, streaming or not, can extract it. Memory stays constant:
only one chunk of one member is in flight at a time, and the exact length is known upfront.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Iterator
from dataclasses import dataclass

from .content import Content

U32 = 0xFFFFFFFF
U16 = 0xFFFF


@dataclass(frozen=True)
class Member:
    name: str
    content: Content
    crc: int
    mtime: float


def _dos_time(ts: float) -> tuple[int, int]:
    t = time.gmtime(max(ts, 315532800))  # zip dates start in 1980
    return (t.tm_hour << 11) | (t.tm_min << 5) | (t.tm_sec // 2), ((t.tm_year - 1980) << 9) | (
        t.tm_mon << 5
    ) | t.tm_mday


def _local_header(m: Member) -> bytes:
    name = m.name.encode()
    big = m.content.size >= U32
    extra = struct.pack("<HHQQ", 1, 16, m.content.size, m.content.size) if big else b""
    size32 = U32 if big else m.content.size
    dtime, ddate = _dos_time(m.mtime)
    return (
        struct.pack(
            "<IHHHHHIIIHH",
            0x04034B50,
            45 if big else 20,
            0x0800,
            0,
            dtime,
            ddate,
            m.crc,
            size32,
            size32,
            len(name),
            len(extra),
        )
        + name
        + extra
    )


def _central_header(m: Member, offset: int) -> bytes:
    name = m.name.encode()
    big_size = m.content.size >= U32
    big_off = offset >= U32
    fields: list[int] = []
    if big_size:
        fields += [m.content.size, m.content.size]
    if big_off:
        fields.append(offset)
    extra = struct.pack(f"<HH{len(fields)}Q", 1, 8 * len(fields), *fields) if fields else b""
    size32 = U32 if big_size else m.content.size
    version = 45 if fields else 20
    dtime, ddate = _dos_time(m.mtime)
    return (
        struct.pack(
            "<IHHHHHHIIIHHHHHII",
            0x02014B50,
            (3 << 8) | version,
            version,
            0x0800,
            0,
            dtime,
            ddate,
            m.crc,
            size32,
            size32,
            len(name),
            len(extra),
            0,
            0,
            0,
            0o100644 << 16,
            U32 if big_off else offset,
        )
        + name
        + extra
    )


def _end_records(count: int, cd_offset: int, cd_size: int) -> bytes:
    out = b""
    if count >= U16 or cd_offset >= U32 or cd_size >= U32:
        eocd64_offset = cd_offset + cd_size
        out += struct.pack("<IQHHIIQQQQ", 0x06064B50, 44, (3 << 8) | 45, 45, 0, 0, count, count, cd_size, cd_offset)
        out += struct.pack("<IIQI", 0x07064B50, 0, eocd64_offset, 1)
    out += struct.pack(
        "<IHHHHIIH", 0x06054B50, 0, 0, min(count, U16), min(count, U16), min(cd_size, U32), min(cd_offset, U32), 0
    )
    return out


def _layout(members: list[Member]) -> tuple[list[int], bytes]:
    offsets: list[int] = []
    position = 0
    for m in members:
        offsets.append(position)
        position += len(_local_header(m)) + m.content.size
    central = b"".join(_central_header(m, off) for m, off in zip(members, offsets, strict=True))
    return offsets, central + _end_records(len(members), position, len(central))


def zip_length(members: list[Member]) -> int:
    _, tail = _layout(members)
    return sum(len(_local_header(m)) + m.content.size for m in members) + len(tail)


def zip_chunks(members: list[Member], chunk_size: int = 1 << 20) -> Iterator[bytes]:
    _, tail = _layout(members)
    for m in members:
        yield _local_header(m)
        yield from m.content.chunks(chunk_size)
    yield tail
