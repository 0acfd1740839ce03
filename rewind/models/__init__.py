from rewind.agents.models import Agent, AgentToken, CredentialsVersion
from rewind.approvals.models import HeldCall, HeldCallApproval
from rewind.audit.models import AuditChainHead, AuditEvent
from rewind.checkpoints.models import ChangeGuard, ChangeGuardVpg, SitePoller, TaggedCheckpoint
from rewind.gateway.models import GatewayCall, Upstream, UpstreamLink, UpstreamTool
from rewind.mcp.models import McpRateCall, McpRateCount
from rewind.notifications.models import NotificationDelivery
from rewind.oauth.models import AgentGrant
from rewind.policy.models import ApprovalRule, PolicyVersion, StopSwitch
from rewind.sites.models import Site, SiteCircuit, ZvmRateWindow, ZvmRequestCount, ZvmToken
from rewind.workers.models import BrokerOutage, WorkerHeartbeat

__all__ = [
    "Agent",
    "AgentGrant",
    "AgentToken",
    "ApprovalRule",
    "AuditChainHead",
    "AuditEvent",
    "BrokerOutage",
    "ChangeGuard",
    "ChangeGuardVpg",
    "CredentialsVersion",
    "GatewayCall",
    "HeldCall",
    "HeldCallApproval",
    "McpRateCall",
    "McpRateCount",
    "NotificationDelivery",
    "PolicyVersion",
    "Site",
    "SiteCircuit",
    "SitePoller",
    "StopSwitch",
    "TaggedCheckpoint",
    "Upstream",
    "UpstreamLink",
    "UpstreamTool",
    "WorkerHeartbeat",
    "ZvmRateWindow",
    "ZvmRequestCount",
    "ZvmToken",
]
