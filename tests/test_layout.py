"""The test tree mirrors the code, and test modules share helpers only through helper modules.

- every package under tests/ is named after a part of the code (``rewind/<part>``, or a
  top-level package such as ``recoveries``), so the tests of a part are found in one place;
- no module imports a test module or a ``conftest``: what two test modules share lives in a
  helper module, the shared ones at the top of tests/ (fixtures, simfixtures, mcpfixtures…),
  a part's own in that part's folder, which no other part imports.
"""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
TOP_LEVEL_PARTS = {"catalog", "recoveries", "zvmsim", "skills", "bench"}


def _packages() -> list[Path]:
    return sorted(p.parent for p in TESTS.glob("*/__init__.py"))


def _imports(path: Path) -> list[str]:
    """The tests.* modules ``path`` imports, relative imports resolved, imports inside functions too."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = ".".join(path.relative_to(REPO).parent.parts)
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
            found.append(f"{base}.{node.module}" if node.module else base)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.append(node.module)
        elif isinstance(node, ast.Import):
            found.extend(alias.name for alias in node.names)
    return [name for name in found if name == "tests" or name.startswith("tests.")]


def test_every_test_package_is_named_after_a_part_of_the_code() -> None:
    strays = [
        p.name
        for p in _packages()
        if p.name not in TOP_LEVEL_PARTS and not (REPO / "rewind" / p.name).is_dir() and p.name != "rewind"
    ]
    assert strays == [], f"tests/{strays} mirror no part of the code (rewind/<part>/ or a top-level package)"


def test_no_module_imports_a_test_module_or_a_conftest() -> None:
    offenders = [
        f"{path.relative_to(REPO)} imports {name}"
        for path in TESTS.rglob("*.py")
        if "node_modules" not in path.parts
        for name in _imports(path)
        if name.rsplit(".", 1)[-1].startswith("test_") or name.rsplit(".", 1)[-1] == "conftest"
    ]
    assert offenders == []


def test_a_parts_own_helpers_stay_in_that_part() -> None:
    offenders = []
    for path in TESTS.rglob("*.py"):
        if "node_modules" in path.parts:
            continue
        own_part = path.relative_to(TESTS).parts[0] if path.parent != TESTS else None
        for name in _imports(path):
            parts = name.split(".")
            if len(parts) >= 3 and parts[1] != own_part:
                offenders.append(f"{path.relative_to(REPO)} imports {name}, a helper of tests/{parts[1]}")
    assert offenders == []
