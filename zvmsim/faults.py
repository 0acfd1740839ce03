"""Injected faults: a list of (kind, site, params, count) that the handlers consult.

A fault with ``site`` None applies to every site; ``count`` None means until cleared, a number
means it is used up after that many applications. Clearing the faults also ends the hangs in
progress (``generation`` moves on), so a test can keep a site stuck exactly as long as it needs.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field
from typing import Any

# kind -> parameters it requires
KINDS: dict[str, tuple[str, ...]] = {
    "checkpoint_listing_delay": ("seconds",),
    "checkpoint_never_listed": (),
    "task_fail": (),
    "task_delay": ("seconds",),
    "http_error": ("status", "path_regex"),
    "hang": ("seconds", "path_regex"),
    "expire_tokens": (),
    "mount_fail": (),
    "mount_delay": ("seconds",),
    "unmount_fail": (),
    "mount_unparseable": (),
    "restart": (),
}

# Faults that act once, right when they are posted, instead of being stored.
IMMEDIATE = {"expire_tokens", "restart"}

# kind -> (parameter, allowed values), for faults whose parameter is a choice
CHOICES: dict[str, tuple[str, tuple[str, ...]]] = {}


class FaultError(ValueError):
    pass


@dataclass
class Fault:
    id: int
    kind: str
    site: str | None
    params: dict[str, Any] = field(default_factory=dict)
    count: int | None = None

    def applies(self, site: str) -> bool:
        return self.site is None or self.site == site

    def as_json(self) -> dict[str, Any]:
        return {"id": self.id, "kind": self.kind, "site": self.site, "count": self.count, **self.params}


def validate(kind: str, params: dict[str, Any]) -> dict[str, Any]:
    if kind not in KINDS:
        raise FaultError(f"unknown fault kind '{kind}'; known: {', '.join(sorted(KINDS))}")
    missing = [p for p in KINDS[kind] if p not in params]
    if missing:
        raise FaultError(f"fault '{kind}' needs {', '.join(missing)}")
    if kind in CHOICES:
        key, allowed = CHOICES[kind]
        if params[key] not in allowed:
            raise FaultError(f"fault '{kind}': {key} must be one of {', '.join(allowed)}")
    if "seconds" in params and not isinstance(params["seconds"], (int, float)):
        raise FaultError("seconds must be a number")
    if "path_regex" in params:
        try:
            re.compile(params["path_regex"])
        except (re.error, TypeError) as exc:
            raise FaultError(f"path_regex does not compile: {exc}") from exc
    if kind == "http_error" and not (isinstance(params["status"], int) and 100 <= params["status"] <= 599):
        raise FaultError("status must be an HTTP status code")
    return params


class Faults:
    def __init__(self) -> None:
        self._faults: list[Fault] = []
        self._ids = itertools.count(1)
        self.generation = 0  # moves on at every clear: a hang started before it ends

    def add(self, kind: str, site: str | None, params: dict[str, Any], count: int | None) -> Fault:
        fault = Fault(next(self._ids), kind, site, validate(kind, params), count)
        self._faults.append(fault)
        return fault

    def clear(self) -> None:
        self._faults.clear()
        self.generation += 1

    def all(self) -> list[Fault]:
        return list(self._faults)

    def take(self, kind: str, site: str, *, method: str | None = None, paths: tuple[str, ...] = ()) -> Fault | None:
        """The newest matching fault, used once (its count drops; at zero it is removed)."""
        for fault in reversed(self._faults):
            if fault.kind != kind or not fault.applies(site):
                continue
            if paths and not any(re.search(fault.params["path_regex"], p) for p in paths):
                continue
            wanted = fault.params.get("method")
            if method and wanted and str(wanted).upper() != method.upper():
                continue
            if fault.count is not None:
                fault.count -= 1
                if fault.count <= 0:
                    self._faults.remove(fault)
            return fault
        return None
