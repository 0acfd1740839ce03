"""What ``bench/guard_concurrency.py --production`` counts as ours of its PostgreSQL's CPU.

The benchmark reads every guard's status every 20 ms on its own connection; the backend serving
those reads is measured apart and left out, once, whether or not that connection was reopened.
"""

from __future__ import annotations

import pytest

from bench.guard_concurrency import ServersSpent


def snapshot(total_postgres_s: float, reader_pid: int, reader_s: float) -> ServersSpent:
    """What ``ServersCpu.spent`` returns: the backends but the reader's, and the reader's apart."""
    return ServersSpent(total_postgres_s - reader_s, 0.5, 10, reader_s, reader_pid)


def test_the_readers_own_backend_is_left_out_of_ours_once() -> None:
    spent = snapshot(9.0, 4242, 1.5) - snapshot(5.0, 4242, 1.0)
    assert spent.reads_s == pytest.approx(0.5)
    assert spent.postgres_s == pytest.approx(3.5)  # 4.0 spent in all, 0.5 of it serving the reads


def test_a_reopened_reader_connection_leaves_only_the_new_backends_cpu_out() -> None:
    # The old backend ended (its CPU now among the reaped): its share stays in ours, never hidden.
    spent = snapshot(9.0, 5151, 0.25) - snapshot(5.0, 4242, 1.0)
    assert spent.reads_s == pytest.approx(0.25)
    assert spent.postgres_s == pytest.approx(3.75)
