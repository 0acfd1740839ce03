"""Fixtures for gateway tests: the guest shell as a real upstream MCP server (tests.gateway.support)."""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.gateway.support import (
    MODULE,
    GuestShellHttp,
    GuestShellStdio,
    run_guestshell,
    sim_args,
)
from tests.simfixtures import PYTHON, REPO, SimHandle, SimServer


@pytest.fixture(scope="session")
def guestshell_http_server(tmp_path_factory: pytest.TempPathFactory, sim_server: SimServer) -> Iterator[GuestShellHttp]:
    token = "gs-" + secrets.token_urlsafe(16)
    with run_guestshell(tmp_path_factory.mktemp("guestshell"), sim_server, token=token) as server:
        yield server


@pytest.fixture
def guestshell_http(guestshell_http_server: GuestShellHttp, sim: SimHandle) -> GuestShellHttp:
    """The HTTP guest shell against a freshly reset simulator, its record emptied."""
    guestshell_http_server.clear()
    return guestshell_http_server


@pytest.fixture
def guestshell_stdio_command(tmp_path: Path, sim: SimHandle) -> GuestShellStdio:
    """The stdio guest shell's command line, against a freshly reset simulator (nothing started yet)."""
    record = tmp_path / "guestshell-stdio-calls.jsonl"
    argv = [PYTHON, "-m", MODULE, "--stdio", *sim_args(sim.server), "--record", str(record)]
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(REPO)}
    return GuestShellStdio(argv, env, record)


@pytest.fixture(scope="module")
def faulty_server(tmp_path_factory: pytest.TempPathFactory, sim_server: SimServer) -> Iterator[GuestShellHttp]:
    """A guest shell that also exports its faulty tools (``--faulty``: write_half, read_stale, write_until_full, write_stalling)."""
    with run_guestshell(tmp_path_factory.mktemp("faulty-guestshell"), sim_server, "--faulty") as server:
        yield server


@pytest.fixture
def faulty(faulty_server: GuestShellHttp, sim: SimHandle) -> GuestShellHttp:
    """The faulty guest shell against a freshly reset simulator, its record emptied."""
    faulty_server.clear()
    return faulty_server
