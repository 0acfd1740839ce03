"""This process's sessions to upstreams, and what they answer when an upstream asks the agent's side.

``link_for(spec)`` is the loop's shared session to an upstream (``rewind.gateway.links.Link``),
``one_off(spec)`` a session of its own (listing, "Test connection"); both answer an upstream's own
requests with ``UpstreamAsks``.

What an upstream asks of the agent's side (sampling, elicitation, roots) is refused, and recorded.

An MCP server may ask its client to have the user's model write something (sampling), to ask the
user a question (elicitation) or to list the user's folders (roots). Through the gateway the
client is this service, and the user is whoever runs the agent: a server that should only run
commands must not reach them. So every such request is refused with a sentence saying why, and
recorded in the audit log (``gateway.upstream.asked``) with what it asked, in a few words.

The session declares the three capabilities, so that what a server asks reaches this module
and is recorded, instead of being answered by the SDK's defaults unseen. An agent's connection
here is stateless, so a request an upstream sends in the middle of a call could not reach it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import weakref
from collections.abc import AsyncIterator
from typing import Any

from mcp import Client
from mcp.client.session import ClientRequestContext
from mcp_types import INVALID_REQUEST, CreateMessageRequestParams, ElicitRequestParams, ErrorData, ListRootsResult

from rewind.gateway.links import Link, UpstreamSpec, open_client
from rewind.gateway.services import upstream_asked_record
from rewind.mcp.context import run_db

logger = logging.getLogger(__name__)

SAID_CHARS = 200


def _said(text: Any) -> str:
    value = str(text or "")
    return value if len(value) <= SAID_CHARS else value[:SAID_CHARS] + "…"


class UpstreamAsks:
    """The callbacks of one upstream's sessions (``rewind.gateway.links``)."""

    def __init__(self, spec: UpstreamSpec) -> None:
        self.spec = spec

    async def _refuse(self, kind: str, summary: dict[str, Any]) -> ErrorData:
        why = (
            f"this server may not ask the agent's side for {kind}: the gateway in front of it serves agents "
            "statelessly, so a request sent in the middle of a call cannot reach them"
        )
        try:
            await run_db(upstream_asked_record, upstream_id=self.spec.pk, kind=kind, summary=summary, refused=why)
        except Exception:  # the refusal stands whether or not it could be recorded
            logger.exception("could not record upstream %s's %s request", self.spec.name, kind)
        return ErrorData(code=INVALID_REQUEST, message=f"refused by zerto-rewind's gateway: {why}")

    async def sampling(self, context: ClientRequestContext, params: CreateMessageRequestParams) -> ErrorData:
        first = params.messages[0].content if params.messages else None
        summary = {"messages": len(params.messages), "max_tokens": params.max_tokens, "first": _said(first)}
        return await self._refuse("sampling", summary)

    async def elicitation(self, context: ClientRequestContext, params: ElicitRequestParams) -> ErrorData:
        return await self._refuse("elicitation", {"message": _said(getattr(params, "message", ""))})

    async def list_roots(self, context: ClientRequestContext) -> ListRootsResult | ErrorData:
        return await self._refuse("roots", {})


# Per event loop (tests run many; a server runs one), per upstream.
_links: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[int, Link]] = weakref.WeakKeyDictionary()


def link_for(spec: UpstreamSpec) -> Link:
    """This loop's link to the upstream; a link opened with older settings is closed and replaced."""
    links = _links.setdefault(asyncio.get_running_loop(), {})
    link = links.get(spec.pk)
    if link is None or link.spec.version != spec.version:
        if link is not None:
            link.discard()
        link = links[spec.pk] = Link(spec, UpstreamAsks(spec))
    return link


@contextlib.asynccontextmanager
async def one_off(spec: UpstreamSpec) -> AsyncIterator[Client]:
    """A session of its own, closed on leaving; raises ``UpstreamUnavailable`` if it cannot open."""
    async with open_client(spec, UpstreamAsks(spec)) as client:
        yield client
