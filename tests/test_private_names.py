"""No file of the project imports a private name or module of a dependency (a leading underscore).

A dependency's private code changes in any release without a word; the public API is the only
one we may build on (mcp, httpx2, httpcore, anyio, Celery, kombu, Django, and every other).
Reaching into a dependency's private attributes is ruff's SLF001 in the product code.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
OURS = {"rewind", "catalog", "recoveries", "zvmsim", "tests", "bench", "manage"}
SCANNED = ("rewind", "catalog", "recoveries", "zvmsim", "tests", "bench")


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _imported(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """(line, dotted name) of every module and name imported, absolute imports only."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                yield node.lineno, f"{node.module}.{alias.name}"


def private_imports(source: str, where: str) -> list[str]:
    found = []
    for line, dotted in _imported(ast.parse(source)):
        parts = dotted.split(".")
        if parts[0] not in OURS and parts[0] != "__future__" and any(_private(p) for p in parts):
            found.append(f"{where}:{line} imports {dotted}")
    return found


def test_no_file_imports_a_private_name_of_a_dependency() -> None:
    offenders = [
        offence
        for top in SCANNED
        for path in sorted((REPO / top).rglob("*.py"))
        if "node_modules" not in path.parts
        for offence in private_imports(path.read_text(encoding="utf-8"), str(path.relative_to(REPO)))
    ]
    assert offenders == []


def test_the_check_sees_each_form_of_a_private_import() -> None:
    source = (
        "from mcp.server._streamable_http_modern import serve\n"
        "from mcp.client.stdio import _drain_stdout, stdio_client\n"
        "import httpcore._async\n"
        "from anyio import _backends\n"
        "from rewind.gateway.links import _leaf\n"  # our own: allowed
        "from django.db import models\n"
        "from mcp import __version__\n"
    )
    assert private_imports(source, "f.py") == [
        "f.py:1 imports mcp.server._streamable_http_modern.serve",
        "f.py:2 imports mcp.client.stdio._drain_stdout",
        "f.py:3 imports httpcore._async",
        "f.py:4 imports anyio._backends",
    ]
