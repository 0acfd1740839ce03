"""Behaviours the ZVM API leaves undocumented, each selectable per site.

The API's documentation leaves these unknown, or says two things about them, and the client
must work with every plausible answer. Each field's default is what this simulator did before
variants existed; every other value is one a real ZVM could plausibly give. They are set on the
command line (for every site) and changed at run time through ``POST /_sim/variants``
(for one site or all); ``/_sim/reset`` goes back to the command line's values.

Unlike faults, which fire once or a counted number of times, a variant is how the ZVM is:
it holds for every call until changed.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Variants:
    # A browse (or download) of a path that does not exist: 404, or the 400 a ZVM gives
    # for any bad input. Either way with {"Message": "Path '...' was not found"}.
    browse_missing_status: int = 404
    # Whether NTFS names match regardless of case in browse and download paths.
    ntfs_case: str = "insensitive"
    # The download answer: "v1/downloads/<id>" or "https://zvm/.../v1/downloads/<id>".
    download_url: str = "relative"
    # One requested file comes back as itself ("raw") or wrapped in a zip ("zip").
    download_format: str = "raw"
    # Inside a zip, a member is named by the path inside its partition ("path"), by the
    # whole FLR path with the partition ("flr_path"), or by its base name ("basename").
    zip_member: str = "path"
    # A link may need time before it serves bytes; until then it answers this status.
    download_ready_after_s: float = 0.0
    download_pending_status: int = 404
    # GET /v1/flrs/{id}: a one-element array (as the 10.x swagger declares) or an object.
    flr_get_shape: str = "array"
    # FlrSessionStatus names. After an unmount a session disappears, or (when
    # ``unmounted_state`` is set) stays listed under that name for ``unmounted_linger_s``.
    mounting_state: str = "MountInProgress"
    mounted_state: str = "MountCompletedSuccessfully"
    mount_failed_state: str = "MountFailed"
    unmounting_state: str = "UnmountInProgress"
    unmounted_state: str | None = None
    unmounted_linger_s: float = 60.0
    # Access token lifetime (expires_in) of this site's Keycloak.
    token_ttl_s: float = 300.0
    # This ZVM's clock minus true time: every time it shows or reads is shifted by it.
    clock_offset_s: float = 0.0
    # A VPG's HistoryStatusApi (the swagger lists ActualHistoryInMinutes,
    # ConfiguredHistoryInMinutes and EarliestCheckpoint; which ones a ZVM fills is not
    # documented): all three ("full"), without ActualHistoryInMinutes ("no_actual"), only
    # the configured history ("configured_only"), or no HistoryStatusApi at all ("missing").
    history_status: str = "full"
    # An FLR mount of a checkpoint that has left the journal: refused at once with the 400 a
    # ZVM gives for any checkpoint it does not hold ("rejected"), or accepted and then the
    # session ends MountFailed ("mount_failed"). Undocumented either way.
    aged_checkpoint_mount: str = "rejected"
    # A browse's PathItems: each Path from the mount root ("full", as the one example shows) or
    # the bare name ("name"); the documentation says neither. A folder's walk must work with both.
    browse_item_path: str = "full"
    # Whether a browse fills LastWriteTime (and the other times) of its items ("given") or leaves
    # them null ("missing"): the swagger declares them, no example shows a file's.
    browse_times: str = "given"

    def as_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def changed(self, changes: dict[str, Any]) -> Variants:
        return dataclasses.replace(self, **validate(changes))


# field -> allowed values (for the fields that are a choice)
CHOICES: dict[str, tuple[Any, ...]] = {
    "browse_missing_status": (400, 404),
    "ntfs_case": ("insensitive", "sensitive"),
    "download_url": ("relative", "absolute"),
    "download_format": ("raw", "zip"),
    "zip_member": ("path", "flr_path", "basename"),
    "download_pending_status": (404, 409),
    "flr_get_shape": ("array", "object"),
    "history_status": ("full", "no_actual", "configured_only", "missing"),
    "aged_checkpoint_mount": ("rejected", "mount_failed"),
    "browse_item_path": ("full", "name"),
    "browse_times": ("given", "missing"),
}
_SECONDS = ("download_ready_after_s", "unmounted_linger_s", "token_ttl_s")
_STATE_NAMES = ("mounting_state", "mounted_state", "mount_failed_state", "unmounting_state")

# Named sets for tests and the command line: the documented-only ZVM's choices, a legacy
# ZVM's state names, and each single change on its own.
PRESETS: dict[str, dict[str, Any]] = {
    "default": {},
    "browse-400": {"browse_missing_status": 400},
    "ntfs-case-sensitive": {"ntfs_case": "sensitive"},
    "absolute-url": {"download_url": "absolute"},
    "zip-path": {"download_format": "zip", "zip_member": "path"},
    "zip-flr-path": {"download_format": "zip", "zip_member": "flr_path"},
    "zip-basename": {"download_format": "zip", "zip_member": "basename"},
    "download-delayed": {"download_ready_after_s": 2.0, "download_pending_status": 409},
    "download-delayed-404": {"download_ready_after_s": 2.0, "download_pending_status": 404},
    "flr-object": {"flr_get_shape": "object"},
    "legacy-states": {"mounted_state": "MountReady", "unmounted_state": "NotMounted"},
    "unmounted-listed": {"unmounted_state": "UnmountCompletedSuccessfully"},
    "short-token": {"token_ttl_s": 12.0},
    "clock-behind": {"clock_offset_s": -300.0},
    "clock-ahead": {"clock_offset_s": 300.0},
    "history-no-actual": {"history_status": "no_actual"},
    "history-configured-only": {"history_status": "configured_only"},
    "history-missing": {"history_status": "missing"},
    "aged-mount-fails": {"aged_checkpoint_mount": "mount_failed"},
    "browse-names": {"browse_item_path": "name"},
    "browse-no-times": {"browse_times": "missing"},
    # Every non-default choice at once: what an independent implementation of the
    # documented API might well do.
    "hostile": {
        "browse_missing_status": 400,
        "ntfs_case": "sensitive",
        "download_url": "absolute",
        "download_format": "zip",
        "zip_member": "flr_path",
        "download_ready_after_s": 1.0,
        "download_pending_status": 409,
        "flr_get_shape": "object",
        "mounted_state": "MountReady",
        "unmounted_state": "NotMounted",
        "token_ttl_s": 20.0,
        "clock_offset_s": -300.0,
        "history_status": "configured_only",
        "aged_checkpoint_mount": "mount_failed",
    },
}


class VariantError(ValueError):
    pass


def validate(changes: dict[str, Any]) -> dict[str, Any]:
    """The changes, checked field by field; raises VariantError naming the first bad one."""
    fields = {f.name for f in dataclasses.fields(Variants)}
    out: dict[str, Any] = {}
    for key, value in changes.items():
        if key not in fields:
            raise VariantError(f"unknown variant '{key}'; known: {', '.join(sorted(fields))}")
        out[key] = _checked(key, value)
    return out


def _checked(key: str, value: Any) -> Any:
    if key in CHOICES:
        if isinstance(value, bool) or value not in CHOICES[key]:
            allowed = ", ".join(str(v) for v in CHOICES[key])
            raise VariantError(f"variant '{key}' must be one of {allowed}")
        return value
    if key in _SECONDS:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
            raise VariantError(f"variant '{key}' must be a number of seconds >= 0")
        if key == "token_ttl_s" and value < 1:
            raise VariantError("variant 'token_ttl_s' must be at least 1 second")
        return float(value)
    if key == "clock_offset_s":
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise VariantError("variant 'clock_offset_s' must be a number of seconds")
        return float(value)
    if key in _STATE_NAMES or key == "unmounted_state":
        if value is None and key == "unmounted_state":
            return None
        if not isinstance(value, str) or not value.strip():
            raise VariantError(f"variant '{key}' must be a non-empty state name")
        return value.strip()
    raise AssertionError(f"no check for variant {key}")


def preset(name: str) -> dict[str, Any]:
    if name not in PRESETS:
        raise VariantError(f"unknown preset '{name}'; known: {', '.join(PRESETS)}")
    return dict(PRESETS[name])


class VariantTable:
    """The variants of every site: a base for all, and per-site replacements on top."""

    def __init__(self, base: Variants) -> None:
        self.base = base
        self._sites: dict[str, Variants] = {}

    def of(self, slug: str) -> Variants:
        return self._sites.get(slug, self.base)

    def update(self, slug: str | None, changes: dict[str, Any]) -> None:
        """Apply ``changes`` to one site, or (slug None) to every site."""
        checked = validate(changes)
        if slug is None:
            self.base = dataclasses.replace(self.base, **checked)
            self._sites = {s: dataclasses.replace(v, **checked) for s, v in self._sites.items()}
        else:
            self._sites[slug] = dataclasses.replace(self.of(slug), **checked)

    def as_json(self, slugs: list[str]) -> dict[str, Any]:
        return {slug: self.of(slug).as_json() for slug in slugs}
