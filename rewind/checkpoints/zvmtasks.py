"""Find the insert tasks a ZVM ran for one VPG since a time (to resolve an interrupted insert)."""

from __future__ import annotations

from datetime import datetime

from rewind.zvm import ZvmClient, ZvmError

INSERT_TASK_TYPE = "InsertTaggedCP"


def insert_tasks_since(client: ZvmClient, vpg_id: str, since: datetime) -> list[str] | None:
    """Ids of the checkpoint-insert tasks for ``vpg_id`` started after ``since``, oldest first.

    None when the ZVM could not be asked: the caller must then not conclude that no insert
    happened.
    """
    try:
        tasks = client.list_tasks(task_type=INSERT_TASK_TYPE, started_after=since)
    except ZvmError:
        return None
    wanted = vpg_id.lower()
    found = [
        (task.started.isoformat() if task.started else "", task.identifier)
        for task in tasks
        if task.identifier
        and wanted in {v.lower() for v in task.vpg_identifiers}
        # A ZVM that ignores the type filter still must not hand us other kinds of task.
        and (task.type or INSERT_TASK_TYPE).lower() == INSERT_TASK_TYPE.lower()
    ]
    return [task_id for _, task_id in sorted(found)]
