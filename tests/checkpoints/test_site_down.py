"""Guards with one of three sites hung: a VM at a healthy site is guarded, a VM of the hung site is refused at once.

Site C hangs on every path (the simulator's ``hang`` fault). The look-up in this process waits
for it once (a short read timeout), which marks it unavailable for every process; the real
worker then inserts and waits through Site A only. Behaviour only (statuses, the refusal, which
requests the simulator saw), never timings.
"""

from __future__ import annotations

from typing import Any

import pytest

from rewind.models import ChangeGuard, Site
from rewind.protection import SitesUnavailableError
from rewind.sites import site_circuit
from tests.helpers import guard_exec, wait_guard_finished

pytestmark = pytest.mark.timeout(300)


def test_a_guard_at_a_healthy_site_succeeds_while_another_site_hangs_and_one_at_the_hung_site_is_refused(
    sim: Any, sites: dict[str, Site], agent: Any, worker: Any, settings: Any
) -> None:
    settings.ZVM_CONNECT_TIMEOUT_S = settings.ZVM_READ_TIMEOUT_S = 0.5  # the look-ups in this process
    settings.ZVM_CIRCUIT_PROBE_S = 600  # no trial falls due during the test
    settings.ZVM_CIRCUIT_PROBE_MAX_S = 1200
    before = sim.requests_seen("site-c")
    sim.add_fault("hang", site="site-c", seconds=3600, path_regex=".*")

    for vm, change in (("web01", "CHG-1"), ("app01", "CHG-2")):  # both protected at Site A
        outcome = guard_exec(agent, vm, command="vi /etc/hosts", action="edit hosts", change_id=change)
        assert outcome.refusal is None
        assert outcome.guard is not None
        guard = wait_guard_finished(outcome.guard)
        assert guard.status == ChangeGuard.Status.OK, guard.error
        assert all(row.checkpoint_identifier for row in guard.vpgs.all())
    assert site_circuit(sites["site-c"]).is_open
    assert sim.requests_seen("site-c") - before <= 1  # reached once at most: its circuit refused the rest

    with pytest.raises(SitesUnavailableError, match=r"protected at a site whose ZVM could not be asked") as refused:
        guard_exec(
            agent, "edge01", command="vi /etc/hosts", action="edit hosts", change_id="CHG-3"
        )  # protected at Site C
    assert refused.value.sites == ("Site C",)
    assert "Site C" in refused.value.message
    assert "unavailable since" in refused.value.message
    assert sim.requests_seen("site-c") - before <= 1
    assert not ChangeGuard.objects.filter(vm_name="edge01").exists()
    sim.clear_faults()
