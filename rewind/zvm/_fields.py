"""Tolerant, case-insensitive reading of ZVM JSON.

Real ZVMs answer in PascalCase while their Swagger shows camelCase, and versions add or drop fields: every
lookup ignores case, a missing or wrongly typed field reads as None, unknown fields are ignored.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

_MS_DATE = re.compile(r"^/Date\((-?\d+)(?:[+-]\d{4})?\)/$")


def parse_datetime(value: object) -> datetime | None:
    """ISO 8601 with or without fraction/``Z``/offset, or the legacy ``/Date(ms)/``, as an aware datetime; no
    offset means UTC (as the ZVM's date filters document); anything else gives None."""
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    if not isinstance(value, str):
        return None
    text = value.strip()
    legacy = _MS_DATE.match(text)
    if legacy:
        # The ms count is UTC epoch; the optional +hhmm suffix only says how to display it.
        return datetime.fromtimestamp(int(legacy.group(1)) / 1000, tz=UTC)
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def format_datetime(value: datetime | str) -> str:
    """The ZVM's filter form ``yyyy-MM-ddTHH:mm:ss.fffZ`` (UTC); strings pass through."""
    if isinstance(value, str):
        return value
    aware = value if value.tzinfo else value.replace(tzinfo=UTC)
    utc = aware.astimezone(UTC)
    return utc.strftime("%Y-%m-%dT%H:%M:%S.") + f"{utc.microsecond // 1000:03d}Z"


class Fields:
    """A case-insensitive, read-only view of one JSON object (anything else reads as empty). A name is looked up as
    written first; only a miss folds the keys to lower case (once), so a ZVM that answers in the case asked for
    costs no copy."""

    __slots__ = ("_folded", "_raw")

    def __init__(self, raw: object) -> None:
        self._raw: Mapping[Any, Any] = raw if isinstance(raw, Mapping) else {}
        self._folded: dict[str, Any] | None = None

    def __bool__(self) -> bool:
        return bool(self._raw)

    def get(self, *names: str) -> Any:
        """The first of ``names`` that is present and not null, whatever the case of its key."""
        for name in names:
            value = self._raw.get(name)
            if value is None:
                value = self._folded_keys().get(name.lower())
            if value is not None:
                return value
        return None

    def _folded_keys(self) -> dict[str, Any]:
        if self._folded is None:
            self._folded = {str(k).lower(): v for k, v in self._raw.items()}
        return self._folded

    def text(self, *names: str) -> str | None:
        value = self.get(*names)
        if isinstance(value, str):
            return value
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return str(value)  # identifiers such as checkpoint ids may come as numbers
        return None

    def integer(self, *names: str) -> int | None:
        value = self.get(*names)
        if isinstance(value, bool):
            return None
        if isinstance(value, int):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, str) and value.strip().lstrip("-").isdigit():
            return int(value.strip())
        return None

    def number(self, *names: str) -> float | None:
        value = self.get(*names)
        if isinstance(value, bool):
            return None
        if isinstance(value, (int, float)):
            return float(value)
        if isinstance(value, str):
            try:
                return float(value)
            except ValueError:
                return None
        return None

    def flag(self, *names: str) -> bool | None:
        value = self.get(*names)
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in ("true", "false"):
            return value.strip().lower() == "true"
        return None

    def when(self, *names: str) -> datetime | None:
        return parse_datetime(self.get(*names))

    def child(self, *names: str) -> Fields:
        return Fields(self.get(*names))

    def items(self, *names: str) -> list[Any]:
        value = self.get(*names)
        return value if isinstance(value, list) else []
