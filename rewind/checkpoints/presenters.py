"""What guards and their tagged checkpoints look like to the outside: one definition each.

The MCP tools answer with these models, the REST views and the OpenAPI schema read the same
definitions, and every other part that shows a tagged checkpoint's journal forecast (a
recovery's checkpoint) takes its fields from here. Selectors only query; the shaping is here.
"""

from __future__ import annotations

# A checkpoint's retention forecast, as every answer that carries one describes it.
LEAVES_JOURNAL_AT_DOC = (
    "Estimated UTC time (ISO 8601) this checkpoint leaves the VPG's journal; after it, no file can be recovered "
    "from it. Refreshed every few minutes; null until estimated, when the ZVM does not tell its journal history, "
    "or for a checkpoint this service did not tag"
)
LEFT_JOURNAL_SEEN_AT_DOC = "Set once Zerto showed the checkpoint gone from the journal: it can no longer be recovered"
