"""Token endpoint, sites, VMs and VPGs."""

from __future__ import annotations

from collections.abc import Iterable
from urllib.parse import parse_qsl

from starlette.responses import JSONResponse, Response

from . import views
from .auth import TokenError
from .ids import DateFormatError, parse_date
from .inventory import Vm, Vpg
from .routing import SITE, Call, ok
from .world import ApiError


def site_ctx(call: Call) -> views.Ctx:
    assert call.ctx is not None
    return call.ctx


@SITE.route("POST", "/auth/realms/zerto/protocol/openid-connect/token", auth=False)
async def token(call: Call) -> Response:
    raw = (await call.raw_body()).decode("utf-8", "replace")
    form = dict(parse_qsl(raw, keep_blank_values=True))
    try:
        slug = site_ctx(call).site.slug
        body = call.world.tokens.issue(slug, form, call.world.now(), call.world.variant(slug).token_ttl_s)
    except TokenError as exc:
        return JSONResponse(exc.body, status_code=exc.status)
    return JSONResponse(body, headers={"Cache-Control": "no-store", "Pragma": "no-cache"})


@SITE.route("POST", "/auth/realms/zerto/protocol/openid-connect/logout", auth=False)
async def logout(call: Call) -> Response:
    return Response(status_code=204)


@SITE.route("GET", "/v1/localsite")
async def localsite(call: Call) -> Response:
    return ok(views.local_site(site_ctx(call)))


@SITE.route("GET", "/v1/peersites")
async def peersites(call: Call) -> Response:
    ctx = site_ctx(call)
    name = call.query.get("peername")
    peers = [s for s in call.world.inv.sites.values() if s.slug != ctx.site.slug and (name is None or s.name == name)]
    return ok([views.peer_site(ctx, s) for s in peers])


@SITE.route("GET", "/v1/peersites/{site_id}")
async def peersite(call: Call) -> Response:
    ctx = site_ctx(call)
    site = call.world.inv.sites_by_id.get(call.params["site_id"].lower())
    if site is None or site.slug == ctx.site.slug:
        raise ApiError(404, f"Peer site '{call.params['site_id']}' was not found")
    return ok(views.peer_site(ctx, site))


@SITE.route("GET", "/v1/virtualizationsites")
async def virtualizationsites(call: Call) -> Response:
    return ok(
        [
            {
                "SiteIdentifier": s.identifier,
                "VirtualizationSiteName": s.name,
                "Link": site_ctx(call).link(
                    "VirtualizationSiteApi", f"virtualizationsites/{s.identifier}", s.identifier
                ),
            }
            for s in call.world.inv.sites.values()
        ]
    )


# ---- VMs --------------------------------------------------------------------------------
def _int_filter(call: Call, key: str) -> int | None:
    raw = call.query.get(key)
    if raw is None or raw == "":
        return None
    try:
        return int(raw)
    except ValueError as exc:
        raise ApiError(400, f"'{raw}' is not a valid value for {key}") from exc


def _vpg_matches(call: Call, vpg: Vpg) -> bool:
    """The filters /v1/vms and /v1/vpgs share, plus 'listed by the ZVM that was called'."""
    slug = site_ctx(call).site.slug
    if slug not in (vpg.protected, vpg.recovery):
        return False
    q = call.query
    inv = call.world.inv
    status, sub = _int_filter(call, "status"), _int_filter(call, "substatus")
    if status is not None and vpg.status != status:
        return False
    if sub is not None and vpg.sub_status != sub:
        return False
    prot, rec = q.get("protectedsiteidentifier"), q.get("recoverysiteidentifier")
    if prot and inv.sites[vpg.protected].identifier != prot.lower():
        return False
    return not (rec and inv.sites[vpg.recovery].identifier != rec.lower())


def _vm_pairs(call: Call) -> Iterable[tuple[Vm, Vpg]]:
    """(VM, VPG) pairs for /v1/vms, starting from an index whenever a filter allows it."""
    q = call.query
    inv = call.world.inv
    vm_id, vm_name, vpg_name = q.get("vmidentifier"), q.get("vmname"), q.get("vpgname")
    if vm_id is not None or vm_name is not None:
        vms = [inv.vm(vm_id)] if vm_id is not None else inv.vms_named(vm_name or "")
        for vm in vms:
            if vm is None or (vm_name is not None and vm.name.lower() != vm_name.lower()):
                continue
            for vpg in inv.vpgs_of(vm):
                yield vm, vpg
        return
    vpgs = inv.vpgs_named(vpg_name) if vpg_name is not None else inv.vpgs_by_site[site_ctx(call).site.slug]
    for vpg in vpgs:
        for vm in inv.vms_of(vpg):
            yield vm, vpg


@SITE.route("GET", "/v1/vms")
async def vms(call: Call) -> Response:
    ctx = site_ctx(call)
    vpg_name = call.query.get("vpgname")
    rows = [
        views.vm_row(ctx, vm, vpg)
        for vm, vpg in _vm_pairs(call)
        if _vpg_matches(call, vpg) and (vpg_name is None or vpg.name.lower() == vpg_name.lower())
    ]
    return ok(rows)


def _vm_vpg(call: Call) -> tuple[Vm, Vpg]:
    ctx = site_ctx(call)
    vm = call.world.vm_at(ctx.site, call.params["vm_id"])
    vpgs = [v for v in call.world.inv.vpgs_of(vm) if ctx.site.slug in (v.protected, v.recovery)]
    wanted = call.query.get("vpgidentifier")
    if wanted:
        vpgs = [v for v in vpgs if v.identifier == wanted.lower()]
        if not vpgs:
            raise ApiError(404, f"VM '{vm.identifier}' is not protected by VPG '{wanted}'")
    elif len(vpgs) > 1:
        raise ApiError(400, f"VM '{vm.identifier}' is protected by {len(vpgs)} VPGs; vpgIdentifier is required")
    return vm, vpgs[0]


@SITE.route("GET", "/v1/vms/{vm_id}")
async def vm_one(call: Call) -> Response:
    vm, vpg = _vm_vpg(call)
    return ok(views.vm_row(site_ctx(call), vm, vpg))


def date_range(call: Call) -> tuple[float | None, float | None]:
    """startDate and endDate, read on the called ZVM's clock, as true times."""
    slug = site_ctx(call).site.slug
    out: list[float | None] = []
    for key in ("startdate", "enddate"):
        raw = call.query.get(key)
        try:
            out.append(call.world.true_time(slug, parse_date(raw)) if raw else None)
        except DateFormatError as exc:
            raise ApiError(400, f"{key}: {exc}") from exc
    return out[0], out[1]


@SITE.route("GET", "/v1/vms/{vm_id}/pointsInTime")
async def points_in_time(call: Call) -> Response:
    ctx = site_ctx(call)
    _, vpg = _vm_vpg(call)
    start, end = date_range(call)
    reason = None
    if vpg.in_initial_sync:
        reason = f"VPG '{vpg.name}' is in initial sync"
    elif ctx.site.slug != vpg.recovery:
        reason = f"File level recovery runs on the recovery site ({call.world.inv.sites[vpg.recovery].name})"
    listed = call.world.journal(vpg).listed(call.world.now(), start, end)
    return ok(
        [
            {
                "Checkpoint": views.checkpoint(ctx, cp),
                "RetentionSet": None,
                "CanMount": {"IsAllowed": reason is None, "Reason": reason},
            }
            for cp in listed
        ]
    )


# ---- VPGs -------------------------------------------------------------------------------
@SITE.route("GET", "/v1/vpgs")
async def vpgs(call: Call) -> Response:
    ctx = site_ctx(call)
    name = call.query.get("name")
    source = call.world.inv.vpgs_named(name) if name is not None else call.world.inv.vpgs_by_site[ctx.site.slug]
    return ok([views.vpg_row(ctx, v) for v in source if _vpg_matches(call, v)])


@SITE.route("GET", "/v1/vpgs/statuses")
async def vpg_statuses(call: Call) -> Response:
    return ok(views.VPG_STATUSES)


@SITE.route("GET", "/v1/vpgs/substatuses")
async def vpg_substatuses(call: Call) -> Response:
    return ok(views.VPG_SUBSTATUSES)


@SITE.route("GET", "/v1/vpgs/priorities")
async def vpg_priorities(call: Call) -> Response:
    return ok(["Low", "Medium", "High"])


@SITE.route("GET", "/v1/vpgs/entitytypes")
async def vpg_entitytypes(call: Call) -> Response:
    return ok(["VCVpg", "VCvApp", "VCDvApp", "AWS", "HyperV"])


@SITE.route("GET", "/v1/vpgs/{vpg_id}")
async def vpg_one(call: Call) -> Response:
    ctx = site_ctx(call)
    return ok(views.vpg_row(ctx, call.world.vpg_at(ctx.site, call.params["vpg_id"])))
