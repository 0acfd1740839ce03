"""Case-insensitive routing, request parsing and the error shape shared by every endpoint."""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from .views import Ctx
from .world import ApiError, World

MAX_BODY = 4 * 1024 * 1024


def error(status: int, message: str, headers: dict[str, str] | None = None) -> Response:
    return JSONResponse({"Message": message}, status_code=status, headers=headers)


def ok(data: Any) -> Response:
    return JSONResponse(data)


def lower_keys(value: Any) -> Any:
    """Body keys bind case-insensitively (checkpointName, CheckpointName, checkpointname)."""
    if isinstance(value, dict):
        return {str(k).lower(): lower_keys(v) for k, v in value.items()}
    if isinstance(value, list):
        return [lower_keys(v) for v in value]
    return value


@dataclass
class Call:
    request: Request
    world: World
    params: dict[str, str]
    ctx: Ctx | None = None  # set for site (/<slug>/...) requests
    _body: Any = field(default=None, repr=False)

    @functools.cached_property
    def query(self) -> dict[str, str]:
        return {k.lower(): v for k, v in self.request.query_params.multi_items()}

    async def raw_body(self) -> bytes:
        data = await self.request.body()
        if len(data) > MAX_BODY:
            raise ApiError(413, "The request body is too large")
        return data

    async def json(self, *, required: bool = True) -> Any:
        """The JSON body with lower-cased keys; 400 when malformed (or absent and required)."""
        if self._body is None:
            raw = await self.raw_body()
            if not raw.strip():
                if required:
                    raise ApiError(400, "The request body is empty; a JSON body is required")
                return {}
            try:
                self._body = lower_keys(json.loads(raw))
            except (ValueError, UnicodeDecodeError) as exc:
                raise ApiError(400, f"The request body is not valid JSON: {exc}") from exc
        return self._body

    async def json_object(self, *, required: bool = True) -> dict[str, Any]:
        body = await self.json(required=required)
        if not isinstance(body, dict):
            raise ApiError(400, "The request body must be a JSON object")
        return body


Handler = Callable[[Call], Awaitable[Response]]


@dataclass(frozen=True)
class Route:
    method: str
    template: str
    regex: re.Pattern[str]
    handler: Handler
    auth: bool


class NoRoute(Exception):
    def __init__(self, status: int) -> None:
        super().__init__(status)
        self.status = status


def _compile(template: str) -> re.Pattern[str]:
    pattern = re.sub(r"\{(\w+)\}", r"(?P<\1>[^/]+)", re.escape(template).replace(r"\{", "{").replace(r"\}", "}"))
    return re.compile(f"^{pattern}/?$", re.IGNORECASE)


class Router:
    def __init__(self) -> None:
        self.routes: list[Route] = []

    def route(self, method: str, template: str, *, auth: bool = True) -> Callable[[Handler], Handler]:
        def register(handler: Handler) -> Handler:
            self.routes.append(Route(method, template, _compile(template), handler, auth))
            return handler

        return register

    def match(self, method: str, path: str) -> tuple[Route, dict[str, str]]:
        allowed = False
        for route in self.routes:
            found = route.regex.match(path)
            if found is None:
                continue
            if route.method == method or (method == "HEAD" and route.method == "GET"):
                return route, found.groupdict()
            allowed = True
        raise NoRoute(405 if allowed else 404)


# The two route tables: the ZVM API under /<slug>, and the simulator control API under /_sim.
SITE = Router()
CONTROL = Router()
