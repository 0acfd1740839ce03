"""Checkpoints and tasks."""

from __future__ import annotations

from starlette.responses import Response

from . import views
from .api_sites import date_range, site_ctx
from .ids import DateFormatError, parse_date
from .journal import Task
from .routing import SITE, Call, ok
from .world import ApiError

TASK_STATES = {
    "inprogress": 1,
    "waitingforuserinput": 2,
    "paused": 3,
    "failed": 4,
    "stopped": 5,
    "completed": 6,
    "cancelling": 7,
}


@SITE.route("GET", "/v1/vpgs/{vpg_id}/checkpoints")
async def checkpoints(call: Call) -> Response:
    ctx = site_ctx(call)
    vpg = call.world.vpg_at(ctx.site, call.params["vpg_id"])
    start, end = date_range(call)
    return ok([views.checkpoint(ctx, cp) for cp in call.world.journal(vpg).listed(call.world.now(), start, end)])


@SITE.route("GET", "/v1/vpgs/{vpg_id}/checkpoints/stats")
async def checkpoint_stats(call: Call) -> Response:
    ctx = site_ctx(call)
    vpg = call.world.vpg_at(ctx.site, call.params["vpg_id"])
    listed = call.world.journal(vpg).listed(call.world.now())
    return ok(
        {
            "Earliest": views.checkpoint(ctx, listed[0] if listed else None),
            "Latest": views.checkpoint(ctx, listed[-1] if listed else None),
        }
    )


@SITE.route("POST", "/v1/vpgs/{vpg_id}/checkpoints")
async def checkpoint_insert(call: Call) -> Response:
    ctx = site_ctx(call)
    vpg = call.world.vpg_at(ctx.site, call.params["vpg_id"])
    body = await call.json_object()
    tag = body.get("checkpointname")
    if not isinstance(tag, str) or not tag.strip():
        raise ApiError(400, "checkpointName is required")
    return ok(call.world.insert_checkpoint(ctx.site, vpg, tag).identifier)


def _task_filter(call: Call, task: Task) -> bool:
    q = call.query
    state, _, completed = task.state(call.world.now())
    wanted = q.get("status")
    if wanted:
        code = TASK_STATES.get(wanted.lower()) if not wanted.isdigit() else int(wanted)
        if code is None:
            raise ApiError(400, f"'{wanted}' is not a valid task status")
        if state != code:
            return False
    if q.get("type") and task.type.lower() != q["type"].lower():
        return False
    bounds = {
        "startedbeforedate": (task.started, 1),
        "startedafterdate": (task.started, -1),
        "completedbeforedate": (completed, 1),
        "completedafterdate": (completed, -1),
    }
    for key, (value, sign) in bounds.items():
        raw = q.get(key)
        if not raw:
            continue
        try:
            limit = call.world.true_time(site_ctx(call).site.slug, parse_date(raw))
        except DateFormatError as exc:
            raise ApiError(400, f"{key}: {exc}") from exc
        if value is None or (value - limit) * sign > 0:
            return False
    return True


@SITE.route("GET", "/v1/tasks")
async def tasks(call: Call) -> Response:
    ctx = site_ctx(call)
    return ok([views.task(ctx, t) for t in call.world.tasks[ctx.site.slug].values() if _task_filter(call, t)])


@SITE.route("GET", "/v1/tasks/types")
async def task_types(call: Call) -> Response:
    return ok(["InsertTaggedCP", "FlrJournalUnmount"])


@SITE.route("GET", "/v1/tasks/{task_id}")
async def task_one(call: Call) -> Response:
    ctx = site_ctx(call)
    return ok(views.task(ctx, call.world.task(ctx.site, call.params["task_id"])))
