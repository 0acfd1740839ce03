"""The suite's secret scan (``tests.secretscan``) sees what it says it sees, and no fuzzer can send a secret.

A scan that misses a kind of write passes every run while secrets go where they must not; a
fuzzer that draws a secret the suite knows makes the scan fail a run now and then, for input an
agent really sent (the audit row records it as sent, which is right).
"""

from __future__ import annotations

import ast
import uuid
from collections.abc import Iterator

import pytest

from rewind.audit import Actor, AuditEntry, audit_append, audit_record
from tests.secretscan import registry
from tests.simfixtures import REPO


@pytest.fixture
def planted() -> Iterator[str]:
    """A secret of this test only; the hits it causes here are taken back afterwards."""
    secret = f"planted-{uuid.uuid4().hex}"
    registry.add("secret planted by tests/test_secretscan.py", secret)
    before = len(registry.hits)
    yield secret
    del registry.hits[before:]


def _new_hits(before: int) -> list[str]:
    return registry.hits[before:]


@pytest.mark.django_db
def test_an_audit_row_with_a_secret_is_found_when_it_is_written(planted: str) -> None:
    """On PostgreSQL every append is one ``WITH ins AS (INSERT ...)`` statement, chained or not, and
    its data goes as psycopg's Jsonb, whose repr cuts long strings and keeps four keys: shaped here
    like a tool call's row, the secret, longer than 30 characters, in its sixth key."""
    data = {"tool": "t", "arguments": {}, "outcome": "ok", "error": "", "duration_ms": 1.0, "said": planted}
    before = len(registry.hits)
    audit_record(actor=Actor.system("tests"), action="test.secret", data=data)
    assert len(_new_hits(before)) == 1
    assert "database write" in _new_hits(before)[0]
    audit_append([AuditEntry(Actor.system("tests"), "test.secret", None, data)], chain=False)
    assert len(_new_hits(before)) == 2
    assert all(planted not in hit for hit in _new_hits(before))  # a hit says where, never what


def _short_string_constants(packages: tuple[str, ...], longest: int = 20) -> set[str]:
    """Every string literal of at most ``longest`` characters in the modules of ``packages``.

    Hypothesis draws string constants of at most 20 characters from the modules of the project
    under test; which modules it counts is its own (it leaves out a module under a folder named
    ``test`` or ``tests``, so a clone at ``~/src/test/zerto-rewind`` gave it none). Read from the
    source with ``ast``, these are every constant it could draw, wherever the clone sits.
    """
    found: set[str] = set()
    for package in packages:
        for path in sorted((REPO / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
                if isinstance(node, ast.Constant) and isinstance(node.value, str) and len(node.value) <= longest:
                    found.add(node.value)
    return found


def test_no_string_hypothesis_may_draw_from_our_modules_holds_a_secret() -> None:
    """Hypothesis draws string constants (of at most 20 characters) from the project's modules."""
    import zvmsim.auth

    pool = _short_string_constants(("rewind", "catalog", "recoveries", "zvmsim"))
    assert zvmsim.auth.PASSWORD_CLIENT_ID in pool  # the simulator's constants are read: the pool is the project's
    pattern = registry.pattern()
    drawn = sorted(registry.kind(m.group(0)) for s in pool if (m := pattern.search(s)))
    assert drawn == []
