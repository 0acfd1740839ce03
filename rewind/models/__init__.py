from rewind.models.agents import Agent, AgentToken
from rewind.models.audit import AuditChainHead, AuditEvent
from rewind.checkpoints.models import ChangeGuard, ChangeGuardVpg, TaggedCheckpoint
from rewind.models.sites import Site
from rewind.models.zvm_shared import ZvmRateWindow, ZvmToken

__all__ = ["Agent", "AgentToken", "AuditChainHead", "AuditEvent", "ChangeGuard", "ChangeGuardVpg", "Site", "TaggedCheckpoint",
           "ZvmRateWindow", "ZvmToken"]
