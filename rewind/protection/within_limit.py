"""Whether a VM a look-up found is within the calling agent's VM limit (``rewind.agents.limits``): judged on the
look-up's answer, before anything is asked to change.
"""

from __future__ import annotations

from rewind.agents.limits import VmLimit
from rewind.lib.errors import PermissionDeniedError
from rewind.protection.results import Protection


class OutsideLimitError(PermissionDeniedError):
    pass


def check_within(limit: VmLimit, protection: Protection, *, agent_name: str) -> None:
    """Raise ``OutsideLimitError`` when ``protection``'s VM is outside ``limit``."""
    if not limit:
        return
    vm = protection.vm_name or protection.vm_identifier
    why = limit.outside(
        vm_name=vm,
        vpgs=[v.name or v.identifier for v in protection.vpgs],
        sites=[v.protected_site.name or v.protected_site.identifier or "?" for v in protection.vpgs],
    )
    if why is not None:
        raise OutsideLimitError(
            f"VM {vm} is outside agent {agent_name}'s limit ({limit.describe()}): {why}; nothing was done. "
            "A person may change the limit on the agent's page in the admin."
        )
