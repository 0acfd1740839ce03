"""Recovered files are deleted REWIND_RECOVERED_RETENTION_DAYS after the recovery; the record stays."""

from __future__ import annotations

import hashlib
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from recoveries.models import RecoveryRequest
from recoveries.presenters import recovery_dict
from recoveries.reaper import recoveries_reap
from recoveries.services import recovery_request_approve, recovery_request_create
from rewind.models import AuditEvent
from tests.helpers import wait_recovery_finished

PURGED = "recoveries.result.purged"


@pytest.fixture
def storage(settings: Any, tmp_path: Path) -> Path:
    settings.REWIND_STORAGE_DIR = tmp_path / "recovered"
    return settings.REWIND_STORAGE_DIR


def _succeeded(agent: Any, tagged: Any, storage: Path, *, days_ago: float, change_id: str = "chg-1") -> RecoveryRequest:
    """A request as the runner leaves it: the file in a folder of its own, sha256 and size recorded."""
    tagged("web01", change_id)
    recovery = recovery_request_create(agent=agent, vm="web01", path="/etc/hostname", reason="x", change_id=change_id)
    data = f"web01 {change_id}\n".encode()
    folder = storage / str(recovery.pk)
    folder.mkdir(parents=True)
    (folder / "hostname").write_bytes(data)
    (folder / ".0123.part").write_bytes(b"left by a crashed download")
    RecoveryRequest.objects.filter(pk=recovery.pk).update(
        status="succeeded",
        ok=True,
        stored_path=str(folder / "hostname"),
        size=len(data),
        sha256=hashlib.sha256(data).hexdigest(),
        finished_at=timezone.now() - timedelta(days=days_ago),
    )
    return RecoveryRequest.objects.get(pk=recovery.pk)


@pytest.mark.django_db
def test_the_reaper_purges_old_files_once_and_keeps_recent_ones(
    sim, sites, agent, tagged, storage, people, settings
) -> None:
    settings.REWIND_RECOVERED_RETENTION_DAYS = 7
    old = _succeeded(agent, tagged, storage, days_ago=8)
    recent = _succeeded(agent, tagged, storage, days_ago=6, change_id="chg-2")
    report = recoveries_reap()
    assert (report.purged_results, report.purge_failed) == (1, 0)
    assert not (storage / str(old.pk)).exists()  # the file and the partial download beside it
    assert Path(recent.stored_path).read_bytes() == b"web01 chg-2\n"
    old.refresh_from_db()
    assert old.purged_at is not None
    assert old.status == "succeeded"
    assert (old.sha256, old.size) == (hashlib.sha256(b"web01 chg-1\n").hexdigest(), 12)
    event = AuditEvent.objects.get(action=PURGED)
    assert event.target_id == str(old.pk)
    assert event.data["sha256"] == old.sha256
    assert event.data["retention_days"] == 7
    # What the agent and the REST API see now.
    result = recovery_dict(old, inline=True)["result"]
    assert result["ok"] is True
    assert result["sha256"] == old.sha256
    assert result["size"] == 12
    assert result["purged_at"] == old.purged_at.isoformat().replace("+00:00", "Z")
    assert "deleted" in result["error"]
    assert "content" not in result
    assert "url" not in result
    client = Client()
    client.force_login(people.approver)
    download = client.get(reverse("recoveries-api:download", args=[old.pk]))
    assert download.status_code == 404
    assert "deleted" in download.json()["detail"]
    assert client.get(reverse("recoveries-api:detail", args=[old.pk])).json()["result"]["purged_at"]
    # A second sweep finds nothing more to do; the recent file goes once it is old enough.
    assert recoveries_reap().purged_results == 0
    assert recoveries_reap(now=timezone.now() + timedelta(days=2)).purged_results == 1
    assert not Path(recent.stored_path).exists()
    assert AuditEvent.objects.filter(action=PURGED).count() == 2


@pytest.mark.django_db
def test_retention_zero_keeps_every_file(sim, sites, agent, tagged, storage, settings) -> None:
    settings.REWIND_RECOVERED_RETENTION_DAYS = 0
    old = _succeeded(agent, tagged, storage, days_ago=400)
    assert recoveries_reap().purged_results == 0
    assert Path(old.stored_path).is_file()
    assert recovery_dict(old, inline=True)["result"]["content"] == "web01 chg-1\n"


@pytest.mark.django_db
def test_a_file_that_cannot_be_deleted_is_left_for_the_next_sweep(sim, sites, agent, tagged, storage, settings) -> None:
    settings.REWIND_RECOVERED_RETENTION_DAYS = 1
    stuck = _succeeded(agent, tagged, storage, days_ago=3)
    # A directory where the file should be: unlink fails, as it would on a read-only volume.
    path = Path(stuck.stored_path)
    path.unlink()
    path.mkdir()
    report = recoveries_reap()
    assert (report.purged_results, report.purge_failed) == (0, 1)
    stuck.refresh_from_db()
    assert stuck.purged_at is None
    assert not AuditEvent.objects.filter(action=PURGED).exists()
    path.rmdir()
    assert recoveries_reap().purged_results == 1


def test_a_real_recovery_is_purged_after_the_retention_period(
    inline_tasks, sim, sites, people, agent, tagged, settings
) -> None:
    tagged("web01")
    recovery = recovery_request_create(agent=agent, vm="web01", path="/etc/hostname", reason="x")
    recovery_request_approve(recovery_id=recovery.pk, user=people.approver)
    recovery = wait_recovery_finished(recovery, tasks=inline_tasks)
    assert recovery.status == "succeeded", recovery.error
    stored = Path(recovery.stored_path)
    assert stored.is_file()
    settings.REWIND_STORAGE_DIR = stored.parent.parent  # where the run put it
    settings.REWIND_RECOVERED_RETENTION_DAYS = 7
    assert recoveries_reap(now=timezone.now() + timedelta(days=6)).purged_results == 0
    assert recoveries_reap(now=timezone.now() + timedelta(days=8)).purged_results == 1
    assert not stored.exists()
    assert not stored.parent.exists()
