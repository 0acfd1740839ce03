"""``make bench`` runs every script under bench/ with ``--json F`` (and ``--quick``): each must take them.

A benchmark that does not failed only when the whole run reached it, minutes in; here each
script's ``--help`` is read instead, which parses nothing but imports everything the script needs.
"""

from __future__ import annotations

import subprocess

import pytest

from bench.run import benchmarks
from tests.simfixtures import PYTHON, REPO

pytestmark = pytest.mark.process


@pytest.mark.parametrize("name", benchmarks())
def test_each_benchmark_takes_the_runners_options(name: str) -> None:
    done = subprocess.run(
        [PYTHON, f"bench/{name}.py", "--help"], cwd=REPO, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "--quick" in done.stdout
    assert "--json" in done.stdout


def test_the_runner_finds_every_benchmark_and_none_of_the_helpers() -> None:
    found = benchmarks()
    assert "gateway" in found
    assert "ratelimit" in found
    assert not [name for name in found if name.startswith("_") or name in ("run", "compare", "figures")]
