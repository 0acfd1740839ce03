from rewind.agents.models import Agent, AgentToken
from rewind.audit.models import AuditChainHead, AuditEvent
from rewind.checkpoints.models import ChangeGuard, ChangeGuardVpg, TaggedCheckpoint
from rewind.mcp.models import McpRateCount
from rewind.sites.models import Site, SiteCircuit, ZvmRateWindow, ZvmToken

__all__ = [
    "Agent",
    "AgentToken",
    "AuditChainHead",
    "AuditEvent",
    "ChangeGuard",
    "ChangeGuardVpg",
    "McpRateCount",
    "Site",
    "SiteCircuit",
    "TaggedCheckpoint",
    "ZvmRateWindow",
    "ZvmToken",
]
