"""Deterministic identifiers and the ZVM date formats."""

from __future__ import annotations

import hashlib
import re
import uuid
from datetime import UTC, datetime


def guid(seed: int, key: str) -> str:
    """A GUID that depends only on (seed, key), so ids survive a reset and do not move with --vms."""
    digest = hashlib.sha256(f"{seed}:{key}".encode()).digest()
    return str(uuid.UUID(bytes=digest[:16], version=4))


def random_guid() -> str:
    return str(uuid.uuid4())


def iso(ts: float | None) -> str | None:
    """ZVM 10.x style timestamp: ISO 8601 UTC with milliseconds and a trailing Z."""
    if ts is None:
        return None
    dt = datetime.fromtimestamp(ts, UTC)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{dt.microsecond // 1000:03d}Z"


_DATE_RE = re.compile(
    r"^(?P<y>\d{4})(?:-(?P<mo>\d{2})(?:-(?P<d>\d{2})"
    r"(?:[T ](?P<h>\d{2})(?::(?P<mi>\d{2})(?::(?P<s>\d{2})(?:\.(?P<f>\d{1,7}))?)?)?)?)?)?"
    r"(?P<tz>Z|[+-]\d{2}:?\d{2})?$",
    re.IGNORECASE,
)


class DateFormatError(ValueError):
    pass


def parse_date(text: str) -> float:
    """Parse every filter format ZVM accepts (yyyy, yyyy-MM, yyyy-MM-dd, yyyy-MM-ddTHHZ,
    yyyy-MM-ddTHH:mmZ, yyyy-MM-ddTHH:mm:ssZ, yyyy-MM-ddTHH:mm:ss.fffZ) into an epoch.

    The simulated ZVMs run on UTC (UtcOffsetInMinutes 0), so a value without a zone is UTC too.
    A '+hh:mm' offset is honoured; a '+' turned into a space by form decoding is repaired.
    """
    raw = text.strip()
    if len(raw) > 10 and raw[-6] == " " and raw[-5:-3].isdigit():
        raw = raw[:-6] + "+" + raw[-5:]
    match = _DATE_RE.match(raw)
    if not match:
        raise DateFormatError(f"'{text}' is not a valid date")
    g = match.groupdict()
    try:
        frac = (g["f"] or "0").ljust(6, "0")[:6]
        dt = datetime(
            int(g["y"]),
            int(g["mo"] or 1),
            int(g["d"] or 1),
            int(g["h"] or 0),
            int(g["mi"] or 0),
            int(g["s"] or 0),
            int(frac),
            tzinfo=UTC,
        )
    except ValueError as exc:
        raise DateFormatError(f"'{text}' is not a valid date") from exc
    seconds = dt.timestamp()
    tz = g["tz"]
    if tz and tz.upper() != "Z":
        sign = 1 if tz[0] == "+" else -1
        digits = tz[1:].replace(":", "")
        seconds -= sign * (int(digits[:2]) * 3600 + int(digits[2:]) * 60)
    return seconds
