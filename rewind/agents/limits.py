"""An agent's VM limit: the VMs it may act on, by name pattern, VPG or site (docs/oauth.md, "VM limits").

Each kind that is set narrows the limit; an empty kind does not limit. It is judged on what a look-up found
(``rewind.protection.within_limit``), before anything is asked to change.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

# What the token stores put in a token's claims, so a look-up needs no query of its own.
CLAIM = "vm_limit"
# The agent's fields that hold it.
FIELDS = ("limit_vm_names", "limit_vpgs", "limit_sites")


def lines(text: str) -> tuple[str, ...]:
    """The non-empty lines of a limit field, stripped, each once."""
    return tuple(dict.fromkeys(line.strip() for line in text.splitlines() if line.strip()))


@dataclass(frozen=True)
class VmLimit:
    vm_names: tuple[str, ...] = ()
    vpgs: tuple[str, ...] = ()
    sites: tuple[str, ...] = ()

    @classmethod
    def of(cls, agent: Any) -> VmLimit:
        return cls(lines(agent.limit_vm_names), lines(agent.limit_vpgs), lines(agent.limit_sites))

    @classmethod
    def from_claim(cls, claim: Any) -> VmLimit:
        if not isinstance(claim, dict):
            return cls()
        return cls(*(tuple(claim.get(k) or ()) for k in ("vm_names", "vpgs", "sites")))

    def as_claim(self) -> dict[str, list[str]]:
        return {"vm_names": list(self.vm_names), "vpgs": list(self.vpgs), "sites": list(self.sites)}

    def __bool__(self) -> bool:
        return bool(self.vm_names or self.vpgs or self.sites)

    def describe(self) -> str:
        parts = [
            f"{label} {', '.join(values)}"
            for label, values in (("VM names", self.vm_names), ("VPGs", self.vpgs), ("sites", self.sites))
            if values
        ]
        return "; ".join(parts) or "every VM"

    def outside(self, *, vm_name: str, vpgs: Iterable[str], sites: Iterable[str]) -> str | None:
        """Why the VM is outside the limit (naming the kind it fails), or None when it is within."""
        lowered = vm_name.lower()
        if self.vm_names and not any(fnmatch.fnmatchcase(lowered, p.lower()) for p in self.vm_names):
            return f"its name matches none of {', '.join(self.vm_names)}"
        wanted_vpgs = {v.lower() for v in self.vpgs}
        other_vpgs = [v for v in vpgs if v.lower() not in wanted_vpgs]
        if self.vpgs and other_vpgs:
            return f"VPG {', '.join(other_vpgs)} protects it, and the VPGs allowed are {', '.join(self.vpgs)}"
        wanted_sites = {s.lower() for s in self.sites}
        other_sites = [s for s in sites if s.lower() not in wanted_sites]
        if self.sites and other_sites:
            return f"it is at site {', '.join(dict.fromkeys(other_sites))}, and the sites allowed are {', '.join(self.sites)}"
        return None
