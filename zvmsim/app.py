"""The ASGI app: one process, several simulated ZVMs under /<slug>, the control API under /_sim.

Every request passes the same gate: route (case-insensitive) -> count the call -> latency
(asyncio.sleep, never blocking the loop) -> injected HTTP error -> Bearer check -> handler ->
injected hang (the work is done, the answer is late; clearing the faults or a reset ends it).
Handlers raise ApiError for {"Message": ...}.
"""

from __future__ import annotations

import asyncio
import logging
import time
from email.utils import formatdate

from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from . import __version__, api_flr, api_journal, api_sites, control  # noqa: F401  (routes register on import)
from .config import SimConfig
from .routing import CONTROL, SITE, Call, NoRoute, error
from .routing import Route as SimRoute
from .views import Ctx
from .world import ApiError, World

log = logging.getLogger("zvmsim")

METHODS = ["GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"]


class Holder:
    """Holds the current World; reset swaps in a fresh one built from the same seed."""

    def __init__(self, config: SimConfig) -> None:
        self.config = config
        self.world = World(config)

    def reset(self) -> None:
        self.world.faults.clear()  # hangs in progress end with the world they were injected in
        self.world = World(self.config)


def _no_route(request: Request, status: int) -> Response:
    if status == 405:
        return error(405, f"The requested resource does not support http method '{request.method}'.")
    return error(404, f"No HTTP resource was found that matches the request URI '{request.url}'.")


async def _control(holder: Holder, request: Request, path: str) -> Response:
    try:
        route, params = CONTROL.match(request.method, path)
    except NoRoute as exc:
        return _no_route(request, exc.status)
    try:
        return await route.handler(Call(request, holder.world, params))
    except ApiError as exc:
        return error(exc.status, exc.message)


async def _latency(holder: Holder, slug: str) -> None:
    latency = holder.world.latency_ms
    ms = latency.get(slug, latency.get(None, 0.0))
    if ms > 0:
        await asyncio.sleep(ms / 1000)


async def _site_call(holder: Holder, request: Request, slug: str, rest: str) -> Response:
    world = holder.world
    try:
        route, params = SITE.match(request.method, rest)
    except NoRoute as exc:
        return _no_route(request, exc.status)
    world.record_call(slug, f"{route.method} {route.template}")
    paths = (rest, request.url.path)
    hang = world.faults.take("hang", slug, method=request.method, paths=paths)
    if rest.lower().startswith("/v1"):
        await _latency(holder, slug)
        world = holder.world  # a reset may have happened while sleeping
    response = await _answer(world, request, route, params, slug, paths)
    response.headers["Date"] = formatdate(world.site_time(slug, world.now()), usegmt=True)
    if hang:
        # The ZVM acts, then the answer is late: a client that times out has to find out
        # what happened (a checkpoint inserted, a session opened) by looking.
        await _hold(world, float(hang.params["seconds"]))
    return response


async def _hold(world: World, seconds: float) -> None:
    """Wait ``seconds``, or until the faults are cleared (or the simulator reset), whichever is first."""
    generation = world.faults.generation
    loop = asyncio.get_running_loop()
    until = loop.time() + seconds
    while world.faults.generation == generation and (left := until - loop.time()) > 0:
        await asyncio.sleep(min(0.05, left))


async def _answer(
    world: World, request: Request, route: SimRoute, params: dict[str, str], slug: str, paths: tuple[str, ...]
) -> Response:
    failure = world.faults.take("http_error", slug, method=request.method, paths=paths)
    if failure:
        status = int(failure.params["status"])
        return error(status, str(failure.params.get("message") or f"Simulated HTTP {status} error"))
    if route.auth and not world.tokens.valid(slug, request.headers.get("authorization"), world.now()):
        return error(
            401, "Authorization has been denied for this request.", {"WWW-Authenticate": 'Bearer realm="zerto"'}
        )
    base = f"{str(request.base_url).rstrip('/')}/{slug}"
    call = Call(request, world, params, ctx=Ctx(world, world.inv.sites[slug], base))
    try:
        return await route.handler(call)
    except ApiError as exc:
        return error(exc.status, exc.message)


async def dispatch(holder: Holder, request: Request) -> Response:
    response = await _dispatch(holder, request)
    if "date" not in response.headers:  # site answers carry their own ZVM's clock
        response.headers["Date"] = formatdate(time.time(), usegmt=True)
    return response


async def _dispatch(holder: Holder, request: Request) -> Response:
    path = request.url.path
    head, _, tail = path.strip("/").partition("/")
    head = head.lower()
    if head == "":
        return JSONResponse({"zvmsim": __version__, "sites": sorted(holder.world.inv.sites), "control": "/_sim/state"})
    if head == "_sim":
        return await _control(holder, request, path)
    if head == "v1":
        # A relative download link joined against a base URL without its trailing slash lands
        # here; the id names its site, so answer it as that site's ZVM would.
        slug = api_flr.download_site(holder.world, tail.rpartition("/")[2])
        if slug is None or not tail.lower().startswith("downloads/"):
            return _no_route(request, 404)
        return await _site_call(holder, request, slug, "/" + path.strip("/"))
    site = holder.world.site(head)
    if site is None:
        return _no_route(request, 404)
    return await _site_call(holder, request, site.slug, "/" + tail)


async def _gone(request: Request, exc: Exception) -> Response:
    """A client that went away before its request was whole (a process stopped mid-call): nobody
    reads the answer, and a ZVM does not report it as its own failure."""
    log.debug("the client left during %s %s", request.method, request.url.path)
    return Response(status_code=400)


async def _crash(request: Request, exc: Exception) -> Response:
    log.exception("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
    return error(500, "An error has occurred.")


def create_app(config: SimConfig, ca_bundle: str | None = None) -> Starlette:
    holder = Holder(config)

    async def endpoint(request: Request) -> Response:
        return await dispatch(holder, request)

    app = Starlette(
        routes=[Route("/{path:path}", endpoint, methods=METHODS)],
        exception_handlers={ClientDisconnect: _gone, Exception: _crash},
    )
    app.state.holder = holder
    app.state.ca_bundle = ca_bundle
    return app
