from rewind.models.agents import Agent, AgentToken
from rewind.models.audit import AuditChainHead, AuditEvent
from rewind.models.checkpoints import ChangeGuard, ChangeGuardVpg
from rewind.models.sites import Site

__all__ = ["Agent", "AgentToken", "AuditChainHead", "AuditEvent", "ChangeGuard", "ChangeGuardVpg", "Site"]
