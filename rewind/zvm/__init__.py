"""ZVM REST client: the one chokepoint between zerto-rewind and Zerto Virtual Managers.

Standalone (no Django): build a ``ZvmConnection`` per site and a ``ZvmClient`` on it.
"""

from __future__ import annotations

from .breaker import Breaker, CircuitPolicy, CircuitState, MemoryBreaker
from .client import Stores, ZvmClient, shared_client, use_shared_stores
from .connection import ZvmConnection
from .errors import (
    ZvmAuthError,
    ZvmError,
    ZvmNotFoundError,
    ZvmRejectedError,
    ZvmSiteUnavailable,
    ZvmTlsError,
    ZvmTransientError,
    ZvmUnparseableResponse,
)
from .pacing import LocalPacer, Pacer
from .tokenstore import MemoryTokenStore, StoredToken, TokenStore
from .types import (
    FLR_MOUNTED,
    TASK_COMPLETED,
    TASK_IN_PROGRESS,
    BrowseItem,
    BrowseResult,
    Checkpoint,
    CheckpointStats,
    DownloadResult,
    FlrSession,
    JournalHistory,
    LocalSite,
    PeerSite,
    PointInTime,
    SiteLink,
    Task,
    VmList,
    VmRow,
    Vpg,
)

__all__ = [
    "FLR_MOUNTED",
    "TASK_COMPLETED",
    "TASK_IN_PROGRESS",
    "Breaker",
    "BrowseItem",
    "BrowseResult",
    "Checkpoint",
    "CheckpointStats",
    "CircuitPolicy",
    "CircuitState",
    "DownloadResult",
    "FlrSession",
    "JournalHistory",
    "LocalPacer",
    "LocalSite",
    "MemoryBreaker",
    "MemoryTokenStore",
    "Pacer",
    "PeerSite",
    "PointInTime",
    "SiteLink",
    "StoredToken",
    "Stores",
    "Task",
    "TokenStore",
    "VmList",
    "VmRow",
    "Vpg",
    "ZvmAuthError",
    "ZvmClient",
    "ZvmConnection",
    "ZvmError",
    "ZvmNotFoundError",
    "ZvmRejectedError",
    "ZvmSiteUnavailable",
    "ZvmTlsError",
    "ZvmTransientError",
    "ZvmUnparseableResponse",
    "shared_client",
    "use_shared_stores",
]
