"""The per-agent rate count of /mcp, when it is kept in the database (no Redis)."""

from __future__ import annotations

from django.db import models


class McpRateCount(models.Model):
    """One agent's count for ``MCP_RATE_LIMIT_PER_MINUTE``, shared by every worker (``rewind.mcp.ratelimit``).

    ``tat`` is GCRA's "theoretical arrival time" of the agent's next call, in microseconds since
    the epoch; ``allowed`` says whether the last call counted went ahead (1) or was refused (0).
    """

    key = models.CharField(max_length=200, primary_key=True)
    tat = models.BigIntegerField(default=0)
    allowed = models.SmallIntegerField(default=1)

    class Meta:
        verbose_name = "MCP rate count"

    def __str__(self) -> str:
        return self.key
