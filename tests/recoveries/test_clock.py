"""A recovery bound to a checkpoint when the protected and recovery ZVMs' clocks differ from ours."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from recoveries.resolve import bind_checkpoint, checkpoint_window
from rewind.models import TaggedCheckpoint
from rewind.sites import site_client


def test_the_checkpoint_time_is_converted_to_the_recovery_sites_clock(sim: Any, sites: Any, tagged: Any) -> None:
    # db01's VPG is protected at site-a (5 minutes behind us) and recovered at site-b (2 ahead).
    sim.control("POST", "variants", {"site": "site-a", "clock_offset_s": -300})
    sim.control("POST", "variants", {"site": "site-b", "clock_offset_s": 120})
    guard = tagged("db01")
    row = TaggedCheckpoint.objects.get(guard=guard)
    assert row.checkpoint_timestamp is not None

    bound = bind_checkpoint(vm="db01", change_id="chg-1")

    assert bound.checkpoint_identifier == row.checkpoint_identifier
    assert bound.checkpoint_timestamp is not None
    shift = bound.checkpoint_timestamp - row.checkpoint_timestamp
    assert abs(shift - timedelta(seconds=420)) < timedelta(seconds=2)
    # Whole seconds: the clocks' measured offsets carry fractions, the time the ZVM listed does not.
    assert shift.microseconds == 0
    assert bound.checkpoint_timestamp.microsecond == row.checkpoint_timestamp.microsecond
    # The recovery site finds the checkpoint in the window the runner asks for.
    start, end = checkpoint_window(bound.checkpoint_timestamp)
    listed = site_client(sites["site-b"]).list_checkpoints(bound.vpg_identifier, start=start, end=end)
    assert row.checkpoint_identifier in {cp.identifier for cp in listed}


def test_clocks_that_agree_with_ours_leave_the_time_as_listed(sim: Any, sites: Any, tagged: Any) -> None:
    guard = tagged("db01")
    row = TaggedCheckpoint.objects.get(guard=guard)
    assert bind_checkpoint(vm="db01", change_id="chg-1").checkpoint_timestamp == row.checkpoint_timestamp
