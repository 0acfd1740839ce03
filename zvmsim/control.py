"""The /_sim control API: inventory facts for tests, guest file edits, faults, latency,
foreign FLR sessions, call counters, resync/status changes, journal history, the simulated
clock, and reset. No auth."""

from __future__ import annotations

import base64
import binascii
import math
from typing import Any

from starlette.responses import JSONResponse, Response, StreamingResponse

from .content import BytesContent, Content, GeneratedContent
from .faults import IMMEDIATE, FaultError, validate
from .ids import iso
from .routing import CONTROL, Call
from .variants import VariantError, preset
from .world import ApiError, World

CHUNK = 1 << 20


def j(data: Any, status: int = 200) -> Response:
    return JSONResponse(data, status_code=status)


def site_base(call: Call, slug: str) -> str:
    return f"{str(call.request.base_url).rstrip('/')}/{slug}"


@CONTROL.route("GET", "/_sim/state")
async def state(call: Call) -> Response:
    inv = call.world.inv
    sites = [
        {
            "slug": s.slug,
            "name": s.name,
            "identifier": s.identifier,
            "type": s.type,
            "base_url": site_base(call, s.slug),
        }
        for s in inv.sites.values()
    ]
    return j(
        {
            "sites": sites,
            "vms": len(inv.vms),
            "vpgs": len(inv.vpgs),
            "seed": inv.seed,
            "ca_bundle": call.request.app.state.ca_bundle,
        }
    )


@CONTROL.route("POST", "/_sim/reset")
async def reset(call: Call) -> Response:
    holder = call.request.app.state.holder
    holder.reset()
    return j({"ok": True})


def _vm_json(world: World, ref: str) -> dict[str, Any]:
    vm = world.one_vm(ref)
    return {
        "identifier": vm.identifier,
        "name": vm.name,
        "ip": vm.ip,
        "os": vm.os_type,
        "vpgs": [
            {"identifier": v.identifier, "name": v.name, "protected": v.protected, "recovery": v.recovery}
            for v in world.inv.vpgs_of(vm)
        ],
    }


@CONTROL.route("GET", "/_sim/vms/{vm}")
async def vm_info(call: Call) -> Response:
    return j(_vm_json(call.world, call.params["vm"]))


def _content(body: dict[str, Any]) -> Content:
    if isinstance(body.get("text"), str):
        return BytesContent(body["text"].encode())
    if isinstance(body.get("content_b64"), str):
        try:
            return BytesContent(base64.b64decode(body["content_b64"], validate=True))
        except (binascii.Error, ValueError) as exc:
            raise ApiError(400, f"content_b64 is not valid base64: {exc}") from exc
    size, seed = body.get("size"), body.get("seed", 0)
    if isinstance(size, int) and size >= 0 and isinstance(seed, int):
        return GeneratedContent(size, seed)
    raise ApiError(400, "give one of: text, content_b64, or size (+ seed)")


def _path(body: dict[str, Any]) -> str:
    path = body.get("path")
    if not isinstance(path, str) or not path:
        raise ApiError(400, "path is required")
    return path


@CONTROL.route("PUT", "/_sim/vms/{vm}/files")
async def file_put(call: Call) -> Response:
    body = await call.json_object()
    vm = call.world.one_vm(call.params["vm"])
    content = _content(body)
    flr_path = call.world.set_file(vm, _path(body), content)
    return j({"ok": True, "vm": vm.identifier, "flr_path": flr_path, "size": content.size})


@CONTROL.route("DELETE", "/_sim/vms/{vm}/files")
async def file_delete(call: Call) -> Response:
    body = await call.json_object(required=False)
    path = body.get("path") or call.query.get("path")
    vm = call.world.one_vm(call.params["vm"])
    flr_path = call.world.delete_file(vm, _path({"path": path}))
    return j({"ok": True, "vm": vm.identifier, "flr_path": flr_path})


@CONTROL.route("GET", "/_sim/vms/{vm}/files")
async def file_get(call: Call) -> Response:
    vm = call.world.one_vm(call.params["vm"])
    entry = call.world.read_file(vm, _path({"path": call.query.get("path")}))
    assert entry.node is not None
    return StreamingResponse(
        entry.node.content.chunks(CHUNK),
        media_type="application/octet-stream",
        headers={"Content-Length": str(entry.node.content.size), "X-Flr-Path": entry.path},
    )


@CONTROL.route("GET", "/_sim/faults")
async def faults_list(call: Call) -> Response:
    return j([f.as_json() for f in call.world.faults.all()])


@CONTROL.route("POST", "/_sim/faults")
async def fault_add(call: Call) -> Response:
    body = dict(await call.json_object())
    kind = body.pop("kind", None)
    site = body.pop("site", None)
    count = body.pop("count", None)
    if not isinstance(kind, str):
        raise ApiError(400, "kind is required")
    if site is not None and call.world.site(str(site)) is None:
        raise ApiError(400, f"unknown site '{site}'")
    if count is not None and (not isinstance(count, int) or count < 1):
        raise ApiError(400, "count must be a positive integer or null")
    site = str(site).lower() if site is not None else None
    try:
        if kind in IMMEDIATE:
            validate(kind, body)
            if kind == "expire_tokens":
                call.world.tokens.drop(site)
            else:
                call.world.restart(site)
            return j({"ok": True, "applied": kind})
        fault = call.world.faults.add(kind, site, body, count)
    except FaultError as exc:
        raise ApiError(400, str(exc)) from exc
    return j(fault.as_json())


@CONTROL.route("DELETE", "/_sim/faults")
async def faults_clear(call: Call) -> Response:
    call.world.faults.clear()
    return j({"ok": True})


@CONTROL.route("POST", "/_sim/latency")
async def latency(call: Call) -> Response:
    body = await call.json_object()
    site, ms = body.get("site"), body.get("ms")
    if site is not None and call.world.site(str(site)) is None:
        raise ApiError(400, f"unknown site '{site}'")
    if not isinstance(ms, (int, float)) or ms < 0:
        raise ApiError(400, "ms must be a number >= 0")
    call.world.latency_ms[str(site).lower() if site is not None else None] = float(ms)
    return j({"ok": True, "latency_ms": {str(k): v for k, v in call.world.latency_ms.items()}})


def _site(call: Call) -> str:
    site = call.world.site(call.params["slug"])
    if site is None:
        raise ApiError(404, f"unknown site '{call.params['slug']}'")
    return site.slug


@CONTROL.route("POST", "/_sim/sites/{slug}/flrs")
async def foreign_mount(call: Call) -> Response:
    world = call.world
    site = world.inv.sites[_site(call)]
    body = await call.json_object()
    vm = world.one_vm(str(body.get("vm") or ""))
    vpg = world.one_vpg(str(body.get("vpg") or ""))
    checkpoint = body.get("checkpoint")
    session = world.flr_mount(
        site, vpg.identifier, vm.identifier, None if checkpoint is None else str(checkpoint), foreign=True
    )
    return j({"session_id": session.identifier})


@CONTROL.route("GET", "/_sim/sites/{slug}/flrs")
async def site_sessions(call: Call) -> Response:
    world = call.world
    now = world.now()
    out = []
    for s in world.sessions(_site(call)).sessions.values():
        vm, vpg = world.inv.vm(s.vm_id), world.inv.vpg(s.vpg_id)
        out.append(
            {
                "session_id": s.identifier,
                "status": s.status(now),
                "foreign": s.foreign,
                "vm": vm.name if vm else None,
                "vm_identifier": s.vm_id,
                "vpg": vpg.name if vpg else None,
                "vpg_identifier": s.vpg_id,
                "checkpoint": s.checkpoint_id,
                "mount_time": iso(s.mount_time),
            }
        )
    return j(out)


@CONTROL.route("GET", "/_sim/sites/{slug}/calls")
async def site_calls(call: Call) -> Response:
    return j(dict(sorted(call.world.calls[_site(call)].items())))


@CONTROL.route("GET", "/_sim/sites/{slug}/rate")
async def site_rate(call: Call) -> Response:
    """Requests this site's ZVM got since the last reset, and the most in any one second."""
    return j(call.world.rates[_site(call)].as_json())


@CONTROL.route("GET", "/_sim/variants")
async def variants_get(call: Call) -> Response:
    world = call.world
    return j({"base": world.variants.base.as_json(), "sites": world.variants.as_json(sorted(world.inv.sites))})


@CONTROL.route("POST", "/_sim/variants")
async def variants_set(call: Call) -> Response:
    """Change how the ZVMs behave: {"site": slug or null, "preset": name?, <variant>: value, ...}."""
    body = dict(await call.json_object())
    site = body.pop("site", None)
    slug = None
    if site is not None:
        found = call.world.site(str(site))
        if found is None:
            raise ApiError(400, f"unknown site '{site}'")
        slug = found.slug
    try:
        changes = preset(str(body.pop("preset"))) if "preset" in body else {}
        changes.update(body)
        call.world.variants.update(slug, changes)
    except VariantError as exc:
        raise ApiError(400, str(exc)) from exc
    return await variants_get(call)


@CONTROL.route("POST", "/_sim/vpgs/{vpg}/resync")
async def resync(call: Call) -> Response:
    vpg = call.world.one_vpg(call.params["vpg"])
    call.world.resync(vpg)
    return j({"ok": True, "vpg": vpg.identifier})


@CONTROL.route("POST", "/_sim/vpgs/{vpg}/status")
async def vpg_status(call: Call) -> Response:
    vpg = call.world.one_vpg(call.params["vpg"])
    body = await call.json_object()
    status, sub = body.get("status"), body.get("sub_status", body.get("substatus"))
    if not isinstance(status, int) or (sub is not None and not isinstance(sub, int)):
        raise ApiError(400, "status (int) is required; sub_status is an int")
    vpg.status = status
    vpg.sub_status = sub if sub is not None else 0
    if isinstance(body.get("failover_test"), bool):
        vpg.failover_test = body["failover_test"]
    if isinstance(body.get("progress"), int):
        vpg.progress = body["progress"]
    return j({"ok": True, "vpg": vpg.identifier, "status": vpg.status, "sub_status": vpg.sub_status})


def _journal_json(world: World, vpg_ref: str) -> dict[str, Any]:
    vpg = world.one_vpg(vpg_ref)
    configured, actual, earliest = world.journal_history(vpg)
    return {
        "vpg": vpg.identifier,
        "auto_checkpoint_s": world.journal(vpg).auto_interval_s,
        "history_minutes": configured / 60,
        "actual_history_minutes": actual / 60,
        "earliest": None
        if earliest is None
        else {"identifier": earliest.identifier, "timestamp": iso(earliest.timestamp)},
    }


@CONTROL.route("GET", "/_sim/vpgs/{vpg}/journal")
async def journal_get(call: Call) -> Response:
    return j(_journal_json(call.world, call.params["vpg"]))


def _auto_seconds(body: dict[str, Any]) -> float:
    seconds = body.get("auto_checkpoint_s")
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not math.isfinite(seconds):
        raise ApiError(400, "auto_checkpoint_s must be a number of seconds (0: no automatic checkpoints)")
    return float(seconds)


@CONTROL.route("POST", "/_sim/vpgs/{vpg}/journal")
async def journal_set(call: Call) -> Response:
    """{"history_minutes": N}: the VPG's journal keeps N minutes; older checkpoints leave it at once.
    {"auto_checkpoint_s": S}: an automatic checkpoint every S seconds from now on (0: none).
    Either key, or both."""
    body = await call.json_object()
    vpg = call.world.one_vpg(call.params["vpg"])
    if "history_minutes" not in body and "auto_checkpoint_s" not in body:
        raise ApiError(400, "give history_minutes, auto_checkpoint_s, or both")
    minutes = body.get("history_minutes")
    if "history_minutes" in body and (
        isinstance(minutes, bool) or not isinstance(minutes, (int, float)) or not minutes > 0
    ):
        raise ApiError(400, "history_minutes must be a number above 0")
    seconds = _auto_seconds(body) if "auto_checkpoint_s" in body else None
    if seconds is not None:
        call.world.set_auto_checkpoints(vpg, seconds)
    if minutes is not None:
        call.world.set_journal_history(vpg, float(minutes) * 60)
    return j(_journal_json(call.world, call.params["vpg"]))


@CONTROL.route("GET", "/_sim/journals")
async def journals_get(call: Call) -> Response:
    return j({"auto_checkpoint_s": call.world.auto_checkpoint_s})


@CONTROL.route("POST", "/_sim/journals")
async def journals_set(call: Call) -> Response:
    """{"auto_checkpoint_s": S}: every VPG's journal takes an automatic checkpoint every S seconds
    from now on (0: none); those taken so far stay. /_sim/reset goes back to the command line's."""
    body = await call.json_object()
    call.world.set_auto_checkpoints(None, _auto_seconds(body))
    return j({"auto_checkpoint_s": call.world.auto_checkpoint_s})


def _clock_json(world: World) -> dict[str, Any]:
    return {"now": iso(world.now()), "shift_s": world.time_shift_s}


@CONTROL.route("GET", "/_sim/clock")
async def clock_get(call: Call) -> Response:
    return j(_clock_json(call.world))


@CONTROL.route("POST", "/_sim/clock")
async def clock_advance(call: Call) -> Response:
    """{"advance_s": N}: N seconds pass at once in the simulated world (every site's clock moves)."""
    body = await call.json_object()
    seconds = body.get("advance_s")
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not math.isfinite(seconds):
        raise ApiError(400, "advance_s must be a number of seconds")
    call.world.advance_clock(float(seconds))
    return j(_clock_json(call.world))
