from rewind.models.audit import AuditChainHead, AuditEvent
from rewind.models.sites import Site

__all__ = ["AuditChainHead", "AuditEvent", "Site"]
