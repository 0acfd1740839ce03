"""The MCP server: each part's tools (its ``mcp_tools`` module), bearer-token auth, one audit row per call.

``build_server(token_stores=...)`` gives the ``MCPServer``; ``build_asgi_app(server)`` gives the ASGI app that
``rewind.asgi`` sends /mcp (and the lifespan) to.

Framework duties, so tools do not repeat them:
- one request id per tool call, bound for services, tasks and ZVM calls;
- ``ApplicationError`` and ``ZvmError`` become tool errors whose text is their message;
- every call is audited (``mcp.tool.called``: agent, tool, masked arguments, outcome,
  duration, request id) after it ends. If that audit row cannot be written, the caller
  gets an error instead of the result (fail-closed);
- every tool's input schema says ``additionalProperties: false``, and an argument a tool does not
  declare is refused by name, with the closest one it does ("did you mean `change_id`?"), before
  anything is done (pydantic would drop it without a word);
- arguments that fail validation give one plain sentence per bad argument (``rewind.mcp.errors``),
  not pydantic's report; an unknown tool is a tool error (``isError``) that names the tools the caller
  may call, so an SDK client hands it to the model instead of raising; an unknown prompt is a
  JSON-RPC error -32602 (invalid params); either names what was asked by a short excerpt only;
- every tool names the scope it needs in its ``_meta`` (``rewind.mcp.scopes.tool_meta``): tools/list
  shows a token only the tools it may call, and a call outside its scopes is refused (the HTTP guard
  answers 403 ``insufficient_scope`` before the SDK sees it; the server refuses again, as a second lock).

What the server offers besides tools, the same in both protocol eras: the skill
(skills/zerto-rewind/SKILL.md) as the prompt ``zerto-rewind`` and as a resource, and no
subscriptions or list-changed notifications (the lists never change while a worker runs).
The OAuth authorization server and the protected-resource metadata are Django's (``rewind.oauth``);
the SDK publishes no metadata of its own, and a 401 points at Django's (``rewind.mcp.http``).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import json
import logging
import pkgutil
import re
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import anyio
from django.apps import apps
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from mcp.server import MCPServer
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
from mcp.server.mcpserver.prompts.base import UserMessage
from mcp.server.request_state import RequestStateSecurity
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS, CallToolResult, GetPromptResult, InputRequiredResult
from mcp_types import Tool as MCPTool
from pydantic import AnyHttpUrl, ValidationError

from rewind import __version__
from rewind.audit import Actor, mask_secrets
from rewind.audit.actions import McpAction
from rewind.lib.errors import ApplicationError
from rewind.lib.requestid import bound_request_id
from rewind.mcp import scopes
from rewind.mcp.auditlog import audit_writer
from rewind.mcp.auth import CachedTokenVerifier, TokenStore
from rewind.mcp.context import call_refs, refs_sentence, writes_with_record
from rewind.mcp.endpoint import MCP_PATH
from rewind.mcp.errors import (
    UnknownToolError,
    excerpt,
    unknown_arguments_message,
    unknown_tool_message,
    validation_message,
)
from rewind.mcp.http import McpHttpGuard
from rewind.mcp.providers import ToolProvider
from rewind.mcp.ratelimit import RateLimit, rate_limiter
from rewind.zvm import ZvmError

logger = logging.getLogger(__name__)

SERVER_NAME = "zerto-rewind"
SKILL_PROMPT = "zerto-rewind"
SKILL_URI = "zerto-rewind://skill/SKILL.md"
# Each part keeps its tools in a module of this name defining register(server); the server
# finds them the way the admin finds admin.py, so this framework names no part.
TOOLS_MODULE = "mcp_tools"
# A tools module may set TOOLS_POSITION (an int, lower first) to say where its tools stand in the
# list clients see; modules without one follow, in app order. Agents read the list top to bottom
# and some clients show only its head, so the parts decide what leads, not the app order.
TOOLS_POSITION_UNSET = 1_000_000

INSTRUCTIONS = """\
zerto-rewind pins Zerto tagged checkpoints before you change a protected VM, and gets files back from them.

Rules:
1. Before ANY tool call that may change a VM (ssh/exec, ansible, winrm, powershell, smb writes, ...), call
   zerto_guard_before_mutate with the tool you are about to call and its exact arguments. Proceed only when it
   answers ok. If it is not ok, do not make the change; report what the guard said.
2. zerto_find_protection tells you which VPGs protect a VM (by name, FQDN, hostname or vmIdentifier) and whether a
   tagged checkpoint can be inserted for each.
3. If a change went wrong, ask for the file back with zerto_recover_file (VM, guest path, checkpoint or change id,
   and a reason). A human approves every recovery; poll zerto_recovery_status until it is done.
4. Your identity comes from your token; never pass an agent name as an argument.
"""


# Error texts may quote an argument; whatever looks like a token is cut out before it is audited.
_TOKEN_IN_TEXT = re.compile(r"(?i)\bbearer\s+\S+|rwd_[A-Za-z0-9_-]{20,}")


def _scrub(text: str) -> str:
    return _TOKEN_IN_TEXT.sub("***", text)


def _root_cause(exc: BaseException) -> BaseException:
    while isinstance(exc, ToolError) and exc.__cause__ is not None:
        exc = exc.__cause__
    return exc


def _caller() -> Actor:
    token = get_access_token()
    return Actor.agent(token.client_id) if token is not None else Actor.system("unauthenticated")


# A call's arguments go into its audit row; a huge argument (a script, a file) is summarized.
AUDITED_ARGUMENTS_MAX_CHARS = 8192


def _audited_arguments(arguments: dict[str, Any]) -> Any:
    masked = mask_secrets(arguments)
    text = json.dumps(masked, ensure_ascii=False, default=str)
    if len(text) <= AUDITED_ARGUMENTS_MAX_CHARS:
        return masked
    return {
        "_summarized": True,
        "chars": len(text),
        "sha256": hashlib.sha256(text.encode()).hexdigest(),
        "preview": text[:2000],
    }


class RewindMCPServer(MCPServer):
    """``MCPServer`` with the framework duties above wrapped around every tool call."""

    def __init__(self, name: str, *, verifier: CachedTokenVerifier, **kwargs: Any) -> None:
        super().__init__(name, token_verifier=verifier, **kwargs)
        self.verifier = verifier  # the HTTP guard checks tokens with the same cache
        self._providers: list[ToolProvider] = []

    def add_tool_provider(self, provider: ToolProvider) -> None:
        self._providers.append(provider)

    def forbid_undeclared_arguments(self) -> None:
        """Say in every own tool's input schema what ``_checked_call`` enforces: no argument it does not declare."""
        for tool in self._tool_manager.list_tools():
            tool.parameters["additionalProperties"] = False

    async def list_tools(self) -> list[MCPTool]:
        granted = _granted_scopes()
        tools = [t for t in await super().list_tools() if _allows(granted, _declared_scope(t.meta))]
        for provider in self._providers:
            if _allows(granted, provider.scope):
                tools += await provider.tools()
        return tools

    async def required_scope(self, name: str) -> str | None:
        """The scope a call of tool ``name`` needs; None for a name that is no tool here."""
        tool = self._tool_manager.get_tool(name)
        if tool is not None:
            return _declared_scope(tool.meta)
        provider = await self._provider_of(name)
        return provider.scope if provider is not None else None

    def check_declared_scopes(self) -> None:
        """Refuse to start with a tool that names no scope: nobody could be granted it, or everyone would."""
        for tool in self._tool_manager.list_tools():
            _declared_scope(tool.meta)

    async def _provider_of(self, name: str) -> ToolProvider | None:
        for provider in self._providers:
            if await provider.has(name):
                return provider
        return None

    async def _checked_call(self, name: str, arguments: dict[str, Any], context: Context | None) -> Any:
        try:
            return await self._call_known(name, arguments, context)
        except UnknownToolError:
            raise ToolError(unknown_tool_message(name, [t.name for t in await self.list_tools()])) from None

    async def _call_known(self, name: str, arguments: dict[str, Any], context: Context | None) -> Any:
        tool = self._tool_manager.get_tool(name)
        if tool is None:
            provider = await self._provider_of(name)
            if provider is not None:
                _check_scope(provider.scope, name)
                return await provider.call(name, arguments, context)
            raise UnknownToolError(name)
        _check_scope(_declared_scope(tool.meta), name)
        properties = tool.parameters.get("properties", {})
        unknown = [key for key in arguments if key not in properties]
        if unknown:
            raise ToolError(unknown_arguments_message(name, unknown, list(properties)))
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            cause = exc.__cause__
            if isinstance(cause, ValidationError) and not isinstance(exc, UnexpectedToolError):
                raise ToolError(validation_message(cause, properties)) from cause
            raise

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Context | None = None) -> Any:
        started = time.perf_counter()
        with bound_request_id(None) as rid, call_refs() as refs, writes_with_record() as writes:
            failure: BaseException | None = None
            outcome, message = "ok", ""
            try:
                with audit_writer.call_running():
                    result = await self._checked_call(name, arguments, context)
                if isinstance(result, CallToolResult):
                    outcome = "error" if result.is_error else "ok"
                else:
                    outcome = "input_required"
            except ToolError as exc:
                cause = _root_cause(exc)
                if isinstance(cause, (ApplicationError, ZvmError)) and isinstance(exc, UnexpectedToolError):
                    failure = ToolError(_scrub(str(cause)))  # an error may quote an argument: never a token
                    failure.__cause__ = cause
                elif _TOKEN_IN_TEXT.search(str(exc)):
                    failure = ToolError(_scrub(str(exc)))  # an error may quote an argument: never a token
                    failure.__cause__ = exc.__cause__
                else:
                    failure = exc
                outcome, message = "error", str(failure)
            except Exception as exc:  # MCPError and anything else: a protocol error, still audited
                failure, outcome, message = exc, "protocol_error", type(exc).__name__
            except BaseException as exc:  # the client went away: the call is still recorded
                failure, outcome, message = exc, "cancelled", type(exc).__name__
            data = {
                "tool": name if len(name) <= 100 else excerpt(name, 100),
                "arguments": _audited_arguments(arguments),
                "outcome": outcome,
                "error": _scrub(message)[:500],
                "duration_ms": round((time.perf_counter() - started) * 1000, 1),
            }
            try:
                with anyio.CancelScope(shield=True):
                    await audit_writer.record(
                        actor=_caller(),
                        action=McpAction.TOOL_CALLED,
                        target=("mcp.tool", data["tool"]),
                        data=data,
                        request_id=rid,
                        also=tuple(writes),
                    )
            except Exception:
                logger.exception("could not audit the call of tool %s (request %s)", name, rid)
                if failure is None or outcome != "cancelled":
                    raise _naming_refs(
                        ToolError(f"the call was not recorded in the audit log (request {rid}); treat it as failed"),
                        refs,
                    ) from None
            if failure is not None:
                raise _naming_refs(failure, refs)
            return result

    async def get_prompt(
        self, name: str, arguments: dict[str, Any] | None = None, context: Context | None = None
    ) -> GetPromptResult | InputRequiredResult:
        # The SDK answers an unknown prompt with an internal error (-32603); the spec names -32602.
        if self._prompt_manager.get_prompt(name) is None:
            raise MCPError(
                code=INVALID_PARAMS,
                message=f"unknown prompt {excerpt(name)}: prompts/list names the prompts of this server",
            )
        return await super().get_prompt(name, arguments, context)


def _declared_scope(meta: dict[str, Any] | None) -> str:
    scope = (meta or {}).get(scopes.META_KEY)
    if scope not in scopes.ALL:
        raise ImproperlyConfigured(f"a tool must name its scope in meta (rewind.mcp.scopes.tool_meta), got {scope!r}")
    return str(scope)


def _granted_scopes() -> frozenset[str] | None:
    """The scopes of this call's token; None outside an authenticated call (a server used in-process)."""
    token = get_access_token()
    return None if token is None else frozenset(token.scopes)


def _allows(granted: frozenset[str] | None, needed: str) -> bool:
    return granted is None or needed in granted


def _check_scope(needed: str, name: str) -> None:
    if not _allows(_granted_scopes(), needed):
        raise ToolError(str(scopes.InsufficientScopeError(needed, f"tool {excerpt(name)}")))


def _naming_refs(failure: BaseException, refs: dict[str, str]) -> BaseException:
    """A tool error that also names what the call created (``call_refers_to``); other failures as they are."""
    said = refs_sentence(refs)
    if not said or not isinstance(failure, ToolError):
        return failure
    text = str(failure).rstrip()
    named = ToolError(f"{text}{'' if text.endswith('.') else '.'} {said}")
    named.__cause__ = failure.__cause__
    return named


def skill_path() -> Path:
    return Path(settings.BASE_DIR) / "skills" / "zerto-rewind" / "SKILL.md"


def skill_body() -> str:
    """SKILL.md without its YAML front matter: the instructions an agent follows."""
    text = skill_path().read_text(encoding="utf-8")
    match = re.match(r"^---\n.*?\n---\n", text, re.DOTALL)
    return text[match.end() :].lstrip("\n") if match else text


def _register_skill(server: MCPServer) -> None:
    description = (
        "How to change Zerto-protected VMs safely with this server: guard first, proceed only on ok, "
        "ask for files back (the zerto-rewind skill)"
    )

    @server.prompt(name=SKILL_PROMPT, title="zerto-rewind: guard before you change a VM", description=description)
    def zerto_rewind_prompt() -> list[UserMessage]:
        return [UserMessage(skill_body())]

    @server.resource(
        SKILL_URI,
        name="zerto-rewind skill",
        title="The zerto-rewind skill (SKILL.md)",
        description=description,
        mime_type="text/markdown",
    )
    def zerto_rewind_skill() -> str:
        return skill_path().read_text(encoding="utf-8")


def _host_variants(host: str) -> list[str]:
    return [host, f"{host}:*"]


def transport_security() -> TransportSecuritySettings:
    """Host and Origin allow-lists from ALLOWED_HOSTS (any port), CSRF_TRUSTED_ORIGINS and REWIND_PUBLIC_URL.

    ``"*"`` in ALLOWED_HOSTS turns the check off. A leading-dot entry (``.example.com``)
    allows only the domain itself: the SDK has no sub-domain wildcard.
    """
    hosts = [h.lstrip(".") for h in settings.ALLOWED_HOSTS]
    if "*" in hosts:
        return TransportSecuritySettings(enable_dns_rebinding_protection=False)
    public = urlsplit(settings.REWIND_PUBLIC_URL)
    if public.hostname and public.hostname not in hosts:
        hosts.append(public.netloc)
    allowed_hosts: list[str] = []
    origins: list[str] = [settings.REWIND_PUBLIC_URL, *settings.CSRF_TRUSTED_ORIGINS]
    for host in hosts:
        allowed_hosts += _host_variants(host)
        for scheme in ("http", "https"):
            origins += [f"{scheme}://{host}", f"{scheme}://{host}:*"]
    return TransportSecuritySettings(allowed_hosts=allowed_hosts, allowed_origins=list(dict.fromkeys(origins)))


def _request_state_security() -> RequestStateSecurity:
    key = settings.MCP_REQUEST_STATE_KEY
    if len(key.encode()) < 32:
        raise ImproperlyConfigured("MCP_REQUEST_STATE_KEY must be at least 32 characters of secret randomness")
    return RequestStateSecurity(keys=[key])


def tool_modules() -> list[str]:
    """``<app>.mcp_tools`` and ``<app>.<package>.mcp_tools`` of every installed app, in app order."""
    found = []
    for app in apps.get_app_configs():
        assert app.module is not None  # every installed app has been imported by now
        subpackages = sorted(f"{app.name}.{i.name}" for i in pkgutil.iter_modules(app.module.__path__) if i.ispkg)
        packages = [app.name, *subpackages]
        for package in packages:
            name = f"{package}.{TOOLS_MODULE}"
            if importlib.util.find_spec(name) is not None:
                found.append(name)
    return found


def _register_tools(server: MCPServer) -> None:
    modules = [importlib.import_module(name) for name in tool_modules()]
    # sorted() is stable: modules at the same position keep their app order.
    for module in sorted(modules, key=lambda m: getattr(m, "TOOLS_POSITION", TOOLS_POSITION_UNSET)):
        module.register(server)


def build_server(*, token_stores: Sequence[TokenStore]) -> RewindMCPServer:
    """The server, taking bearer tokens that one of ``token_stores`` knows (the project hands it the
    agents' pasted tokens and the OAuth grants' tokens)."""
    public = settings.REWIND_PUBLIC_URL
    server = RewindMCPServer(
        name=SERVER_NAME,
        version=__version__,
        instructions=INSTRUCTIONS,
        verifier=CachedTokenVerifier(token_stores),
        auth=AuthSettings(
            # Django publishes the metadata and runs the authorization server (rewind.oauth), and the
            # HTTP guard checks each token's resource against the address the request came to (which
            # the SDK's one fixed resource URL could not follow when REWIND_PUBLIC_URL is unset).
            # Without a resource URL the SDK publishes nothing of its own; the issuer URL is required
            # but unused.
            issuer_url=AnyHttpUrl(public),
            resource_server_url=None,
        ),
        request_state_security=_request_state_security(),
        # Nothing here changes while a worker runs, and a stateless server has no stream to
        # push on: without a bus, neither era advertises listChanged or subscribe.
        subscriptions=False,
    )
    _register_tools(server)
    server.check_declared_scopes()
    server.forbid_undeclared_arguments()
    _register_skill(server)
    return server


def build_asgi_app(server: RewindMCPServer) -> Any:
    """The SDK's streamable-HTTP app (stateless: any worker serves any request) behind the guard.

    The guard passes non-HTTP scopes through, so the lifespan reaches the SDK app, whose
    session manager must run for /mcp to answer at all.
    """
    sdk_app = server.streamable_http_app(
        streamable_http_path=MCP_PATH,
        stateless_http=True,
        json_response=False,  # keeps progress notifications (SSE) on both protocol eras
        transport_security=transport_security(),
        max_request_body_size=settings.MCP_MAX_BODY_BYTES,
    )
    verifier = server.verifier
    limit = RateLimit(settings.MCP_RATE_LIMIT_PER_MINUTE, settings.MCP_RATE_LIMIT_BURST)
    limiter = rate_limiter(limit, settings.MCP_RATE_LIMIT_REDIS_URL)
    guard = McpHttpGuard(
        sdk_app,
        verifier=verifier,
        max_body_bytes=settings.MCP_MAX_BODY_BYTES,
        limiter=limiter,
        required_scope=server.required_scope,
    )
    return guard
