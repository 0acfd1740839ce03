"""The per-agent rate count of /mcp, when it is kept in the database (no Redis)."""

from __future__ import annotations

from django.db import models


class McpRateCount(models.Model):
    """One agent's row for ``MCP_RATE_LIMIT_PER_MINUTE``, shared by every worker, locked while a call of the agent
    is decided. ``tat`` is the burst pacing's theoretical arrival time (GCRA, µs since the epoch; 0 while bursts
    are not limited); ``calls`` counts its ``McpRateCall`` rows, so the calls are read only at the limit."""

    key = models.CharField(max_length=200, primary_key=True)
    tat = models.BigIntegerField(default=0)
    calls = models.IntegerField(default=0, help_text="The agent's McpRateCall rows")

    class Meta:
        verbose_name = "MCP rate count"

    def __str__(self) -> str:
        return self.key


class McpRateCall(models.Model):
    """One accepted call of an agent still inside the limit's window (older ones are deleted as calls come)."""

    key = models.CharField(max_length=200)
    at = models.BigIntegerField(help_text="Microseconds since the epoch")

    class Meta:
        verbose_name = "MCP rate call"
        indexes = [models.Index(fields=["key", "at"], name="rewind_mcp_rate_call_key_at")]

    def __str__(self) -> str:
        return f"{self.key} at {self.at}"
