"""Find the insert tasks a ZVM ran for one VPG since a time (to resolve an interrupted insert).

``ZvmClient`` has no task listing yet, so this reads ``GET /v1/tasks`` through the client's
own chokepoint (token, timeouts, retries of GETs) and parses the rows tolerantly here.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from rewind.zvm import ZvmClient, ZvmError
from rewind.zvm._fields import format_datetime

INSERT_TASK_TYPE = "InsertTaggedCP"


def _get(raw: Any, key: str) -> Any:
    if not isinstance(raw, Mapping):
        return None
    return next((v for k, v in raw.items() if str(k).lower() == key.lower()), None)


def _vpg_ids(raw: Any) -> set[str]:
    links = _get(_get(raw, "RelatedEntities"), "Vpgs") or []
    return {str(_get(link, "identifier")).lower() for link in links if _get(link, "identifier")}


def insert_tasks_since(client: ZvmClient, vpg_id: str, since: datetime) -> list[str] | None:
    """Ids of the checkpoint-insert tasks for ``vpg_id`` started after ``since``, oldest first.

    None when the ZVM could not be asked: the caller must then not conclude that no insert
    happened.
    """
    params = {"type": INSERT_TASK_TYPE, "startedAfterDate": format_datetime(since)}
    try:
        rows = client._get("/v1/tasks", params)  # noqa: SLF001 - see the module docstring
    except ZvmError:
        return None
    if isinstance(rows, Mapping):
        rows = [rows]
    if not isinstance(rows, list):
        return None
    wanted = vpg_id.lower()
    found = [
        (str(_get(r, "Started") or ""), str(_get(r, "TaskIdentifier")))
        for r in rows
        if _get(r, "TaskIdentifier") and wanted in _vpg_ids(r)
        and str(_get(r, "Type") or INSERT_TASK_TYPE).lower() == INSERT_TASK_TYPE.lower()
    ]
    return [task_id for _, task_id in sorted(found)]
