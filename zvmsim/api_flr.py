"""File Level Recovery: mount, list, get, browse, download links, the downloads, unmount."""

from __future__ import annotations

import asyncio
from typing import Any

from starlette.responses import Response, StreamingResponse

from . import views
from .api_sites import site_ctx
from .flr import Download
from .routing import SITE, Call, ok
from .variants import Variants
from .world import ApiError, World
from .zipstream import Member, zip_chunks, zip_length

CHUNK = 1 << 20


@SITE.route("GET", "/v1/flrs")
async def flr_list(call: Call) -> Response:
    ctx = site_ctx(call)
    vm_id = (call.query.get("vmidentifier") or "").lower()
    sessions = call.world.sessions(ctx.site.slug).sessions.values()
    return ok([views.flr_session(ctx, s) for s in sessions if not vm_id or s.vm_id.lower() == vm_id])


def _text(value: Any, name: str, *, required: bool = True) -> str | None:
    if value is None and not required:
        return None
    if not isinstance(value, (str, int)) or isinstance(value, bool) or str(value).strip() == "":
        raise ApiError(400, f"{name} is required")
    return str(value)


@SITE.route("POST", "/v1/flrs")
async def flr_mount(call: Call) -> Response:
    ctx = site_ctx(call)
    body = await call.json_object()
    if "bflr" in body and "jflr" not in body:
        raise ApiError(400, "Extended Journal (bflr) file level recovery is not available here")
    jflr = body.get("jflr")
    if not isinstance(jflr, dict):
        raise ApiError(400, "The request must carry a 'jflr' object")
    session = call.world.flr_mount(
        ctx.site,
        _text(jflr.get("vpgidentifier"), "jflr.vpgIdentifier") or "",
        _text(jflr.get("vmidentifier"), "jflr.vmIdentifier") or "",
        _text(jflr.get("checkpointidentifier"), "jflr.checkpointIdentifier"),
        _text(jflr.get("initialdownloadpath"), "initialDownloadPath", required=False),
    )
    broken = call.world.faults.take("mount_unparseable", ctx.site.slug)
    if broken:
        # The session exists, but the answer cannot be read as its id.
        body_text = str(broken.params.get("body", "Mount request accepted"))
        return Response(body_text, media_type="application/json")
    return ok(session.identifier)


@SITE.route("GET", "/v1/flrs/{session_id}")
async def flr_get(call: Call) -> Response:
    ctx = site_ctx(call)
    item = views.flr_session(ctx, call.world.flr_session(ctx.site, call.params["session_id"]))
    return ok(item if call.world.variant(ctx.site.slug).flr_get_shape == "object" else [item])


@SITE.route("DELETE", "/v1/flrs/{session_id}")
async def flr_unmount(call: Call) -> Response:
    ctx = site_ctx(call)
    return ok(call.world.flr_unmount(ctx.site, call.params["session_id"]).identifier)


def _page(items: list[Any], body: dict[str, Any]) -> list[Any]:
    number, size = body.get("pagenumber"), body.get("pagesize")
    if not isinstance(number, int) or not isinstance(size, int) or size <= 0:
        return items
    start = max(number - 1, 0) * size  # pages count from 1
    return items[start : start + size]


@SITE.route("POST", "/v1/flrs/{session_id}/browse")
async def flr_browse(call: Call) -> Response:
    ctx = site_ctx(call)
    body = await call.json_object(required=False)
    path = body.get("path") or ""
    if not isinstance(path, str):
        raise ApiError(400, "path must be a string")
    main, children = call.world.flr_browse(ctx.site, call.params["session_id"], path)
    variant = call.world.variant(ctx.site.slug)
    items = _page([_as_variant(views.path_item(e), variant) for e in children], body)
    return ok(
        {
            "MainPathItem": views.root_item(call.world.epoch) if main is None else views.path_item(main),
            "PathItems": items,
        }
    )


def _as_variant(item: dict[str, Any], variant: Variants) -> dict[str, Any]:
    """A browse item as this ZVM spells it: a bare name for a Path, or no times (variants)."""
    if variant.browse_item_path == "name":
        item["Path"] = item["Path"].rpartition("/")[2]
    if variant.browse_times == "missing":
        item.update(CreationTime=None, LastAccessTime=None, LastWriteTime=None)
    return item


@SITE.route("POST", "/v1/flrs/{session_id}/download")
async def flr_download(call: Call) -> Response:
    ctx = site_ctx(call)
    body = await call.json_object()
    paths = body.get("pathlist")
    if not isinstance(paths, list) or not paths or not all(isinstance(p, str) for p in paths):
        raise ApiError(400, "pathList must be a non-empty list of paths")
    download = call.world.flr_download(ctx.site, call.params["session_id"], paths)
    relative = f"v1/downloads/{download.identifier}"
    return ok(f"{ctx.base}/{relative}" if call.world.variant(ctx.site.slug).download_url == "absolute" else relative)


@SITE.route("GET", "/v1/downloads/{download_id}")
async def download(call: Call) -> Response:
    ctx = site_ctx(call)
    return await stream_download(call.world.download(ctx.site.slug, call.params["download_id"]))


def download_site(world: World, download_id: str) -> str | None:
    """The site a download id belongs to (ids end with the site GUID), for root-level links."""
    site = world.inv.sites_by_id.get(download_id.rpartition(".")[2].lower())
    return site.slug if site else None


async def stream_download(found: Download) -> Response:
    if not found.zipped:
        name, node = found.files[0]
        return StreamingResponse(
            node.content.chunks(CHUNK),
            media_type="application/octet-stream",
            headers={
                "Content-Length": str(node.content.size),
                "Content-Disposition": f'attachment; filename="{name.rpartition("/")[2]}"',
            },
        )
    # CRCs go in the local headers, so compute them first, off the event loop.
    crcs = await asyncio.to_thread(lambda: [node.content.crc32() for _, node in found.files])
    members = [Member(name, node.content, crc, node.mtime) for (name, node), crc in zip(found.files, crcs, strict=True)]
    return StreamingResponse(
        zip_chunks(members, CHUNK),
        media_type="application/zip",
        headers={
            "Content-Length": str(zip_length(members)),
            "Content-Disposition": 'attachment; filename="download.zip"',
        },
    )
