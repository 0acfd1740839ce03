"""Checks of a deployment (``manage.py check --deploy``) that Django's own do not make.

The audit anchors catch a rewritten chain only if whoever can rewrite the database cannot also reach their
signing key or their file; by default both sit beside the SQLite database, a warning for a deployment
(docs/audit-integrity.md says where to put them).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Tags, register
from django.core.checks import Warning as CheckWarning
from django.db import connections

WHERE_TO = (
    "put it on another disk, readable by the service only (see docs/audit-integrity.md), "
    "and send every anchor to another machine (REWIND_AUDIT_ANCHOR_SYSLOG)"
)


@register(Tags.security, deploy=True)
def audit_anchors_apart_from_the_database(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    folder = _sqlite_folder()
    return [] if folder is None else anchors_beside(folder)


def anchors_beside(folder: Path) -> list[CheckMessage]:
    """The warnings for an anchor key or file under ``folder``, the SQLite database's."""
    found: list[CheckMessage] = []
    key = settings.REWIND_AUDIT_ANCHOR_KEY_PATH
    if key is not None and _under(Path(key), folder):
        found.append(
            CheckWarning(
                f"the key that signs the audit anchors is read from {key}, beside the database in {folder}: "
                "whoever can rewrite the database can sign anchors for the rewritten chain",
                hint=f"give it in REWIND_AUDIT_ANCHOR_KEY_FILE; {WHERE_TO}",
                id="rewind.W001",
            )
        )
    anchors = Path(settings.REWIND_AUDIT_ANCHOR_FILE)
    if _under(anchors, folder):
        found.append(
            CheckWarning(
                f"the audit anchors are written to {anchors}, beside the database in {folder}: whoever can "
                "rewrite the database can cut the anchors with it",
                hint=f"set REWIND_AUDIT_ANCHOR_FILE; {WHERE_TO}",
                id="rewind.W002",
            )
        )
    return found


def _sqlite_folder() -> Path | None:
    database = connections["default"].settings_dict
    if not str(database["ENGINE"]).endswith("sqlite3"):
        return None
    return Path(database["NAME"]).resolve().parent


def _under(path: Path, folder: Path) -> bool:
    return path.resolve().is_relative_to(folder)
