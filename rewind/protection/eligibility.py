"""Whether a tagged checkpoint can be inserted on a VPG, and if not, why (said to the agent): not in a public-cloud
protected site, not during initial sync (Zerto adds no checkpoints then), not when the protected site's ZVM is
not configured here.
"""

from __future__ import annotations

from rewind.protection.results import SiteRef

CLOUD_SITE_TYPES = {"aws", "azure", "publiccloud", "gcp"}
INITIAL_SYNC_SUBSTATUSES = {1: "InitialSync", 3: "VolumeInitialSync"}


def insert_refusal(
    vpg_name: str | None,
    protected: SiteRef,
    status_name: str | None,
    status: int | None,
    sub_status: int | None,
    sub_status_name: str | None,
) -> str | None:
    """Why no tagged checkpoint can be inserted on the VPG, or None when one can."""
    site = protected.name or protected.identifier or "unknown"
    if (protected.type or "").casefold() in CLOUD_SITE_TYPES:
        return (
            f"VPG {vpg_name} is protected in {protected.type} site {site}; Zerto cannot insert "
            "tagged checkpoints for it from here"
        )
    if (
        sub_status in INITIAL_SYNC_SUBSTATUSES
        or (sub_status_name or "").casefold() in {"initialsync", "volumeinitialsync"}
        or (status_name or "").casefold() == "initializing"
        or (status == 0 and status_name is None)
    ):
        return f"VPG {vpg_name} is in initial sync; Zerto adds no checkpoints until it finishes"
    if not protected.configured:
        return f"the ZVM of protected site {site} is not configured here"
    return None
