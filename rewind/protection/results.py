"""What a protection look-up answers: the VM, its VPGs and their sites, or why it could not."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rewind.lib.errors import ApplicationError, NotFoundError


@dataclass(frozen=True)
class SiteRef:
    identifier: str | None
    name: str | None
    type: str | None
    configured: bool
    site_pk: int | None


@dataclass(frozen=True)
class VpgProtection:
    identifier: str
    name: str | None
    protected_site: SiteRef
    recovery_site: SiteRef
    status: int | None
    status_name: str | None
    sub_status: int | None
    sub_status_name: str | None
    is_flr_enabled: bool
    can_insert_checkpoint: bool
    cannot_insert_reason: str | None


@dataclass(frozen=True)
class Protection:
    vm_identifier: str
    vm_name: str | None
    vpgs: tuple[VpgProtection, ...]
    # Sites that could not be asked; the answer is complete anyway (see rewind.protection.lookup).
    unavailable_sites: tuple[str, ...] = ()
    note: str | None = None


@dataclass(frozen=True)
class Candidate:
    name: str | None
    identifier: str
    sites: tuple[str, ...]

    def describe(self) -> str:
        return f"{self.name} ({self.identifier}) on {', '.join(self.sites)}"


class VmNotFoundError(NotFoundError):
    pass


class VmAmbiguousError(ApplicationError):
    def __init__(self, query: str, candidates: Sequence[Candidate]) -> None:
        listing = "; ".join(c.describe() for c in candidates)
        super().__init__(
            f"{query!r} matches {len(candidates)} VMs: {listing}. Ask again with the vmIdentifier.",
            extra={"candidates": [c.__dict__ for c in candidates]},
        )
        self.candidates = tuple(candidates)


class SitesUnavailableError(ApplicationError):
    """The look-up cannot be answered because sites that might know the VM could not be asked."""

    def __init__(self, message: str, *, sites: Sequence[str]) -> None:
        super().__init__(message, extra={"unavailable_sites": sorted(sites)})
        self.sites = tuple(sorted(sites))
