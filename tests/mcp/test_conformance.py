"""The official MCP conformance suites (tests.conformance) against the real /mcp, under uvicorn with
an agent's token: every scenario a server without the suites' fixture tools can be held to, in the
handshake era (the stable suite, 2025-11-25) and in 2026-07-28 (the alpha suite), and every check
of theirs passes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.conformance import (
    ALPHA,
    FIXTURE_TOOL_CHECKS,
    HANDSHAKE_ERA,
    HANDSHAKE_SCENARIOS,
    MODERN_ERA,
    MODERN_SCENARIOS,
    STABLE,
    run_scenarios,
)

ERAS = {
    HANDSHAKE_ERA: (STABLE, HANDSHAKE_SCENARIOS),
    MODERN_ERA: (ALPHA, MODERN_SCENARIOS),
}


@pytest.mark.parametrize("era", list(ERAS))
def test_the_mcp_endpoint_passes_every_check_of_the_conformance_suite(
    era: str, conformance_suites: None, mcp_server: Any, agent_token: Any, tmp_path: Path
) -> None:
    suite, scenarios = ERAS[era]
    results = run_scenarios(suite, mcp_server.mcp_url, scenarios, tmp_path, token=agent_token[1], spec_version=era)
    failed = [
        result.report(FIXTURE_TOOL_CHECKS) for result in results.values() if not result.passed(FIXTURE_TOOL_CHECKS)
    ]
    assert failed == [], "\n".join(failed)
