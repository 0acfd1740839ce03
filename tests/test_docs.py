"""The documentation says what the code does: every environment variable read is in docs/configuration.md.

The names are found in the source, never by importing the settings and guessing: rewind/settings.py
and the project modules it imports are parsed with ``ast``. A function is a *reader* when it hands
one of its parameters, or an f-string of it such as ``f"{name}_FILE"``, to ``os.environ`` or to
another reader (``env_int`` → ``_raw`` → ``os.environ.get``; ``_persistent_secret`` → ``env_secret``,
which reads NAME and NAME_FILE); each call of a reader with a literal name reads that name. A
module of the product that reads ``os.environ`` itself (``manage.py runstack`` and ``demo`` read
the ports) counts too. The page documents a name when a row of one of its tables names it in
backticks in its first column.
"""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SETTINGS = REPO / "rewind" / "settings.py"
CONFIGURATION_PAGE = REPO / "docs" / "configuration.md"
PRODUCT_PACKAGES = ("rewind", "catalog", "recoveries")
# Names read but deliberately left off the page: none. A name added here needs a reason beside it.
IGNORED: frozenset[str] = frozenset()

# A reader's reads: (the parameter holding the name, the suffix added to it).
Reads = set[tuple[str, str]]


def _is_environ(node: ast.expr) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "environ" and _dotted(node.value) == "os"


def _dotted(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return f"{base}.{node.attr}" if base else None
    return None


def _environ_name_arg(node: ast.AST) -> ast.expr | None:
    """The name argument of ``os.environ.get(X)``, ``os.getenv(X)`` or ``os.environ[X]``."""
    if isinstance(node, ast.Subscript) and _is_environ(node.value) and isinstance(node.ctx, ast.Load):
        return node.slice
    if isinstance(node, ast.Call) and node.args:
        func = node.func
        if _dotted(func) == "os.getenv" or (
            isinstance(func, ast.Attribute) and func.attr == "get" and _is_environ(func.value)
        ):
            return node.args[0]
    return None


def _template(arg: ast.expr) -> tuple[str | None, str] | None:
    """``"NAME"`` → (None, "NAME"); ``param`` → ("param", ""); ``f"{param}_FILE"`` → ("param", "_FILE")."""
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return None, arg.value
    if isinstance(arg, ast.Name):
        return arg.id, ""
    if isinstance(arg, ast.JoinedStr) and arg.values and isinstance(arg.values[0], ast.FormattedValue):
        head, rest = arg.values[0].value, arg.values[1:]
        if isinstance(head, ast.Name) and all(isinstance(v, ast.Constant) for v in rest):
            return head.id, "".join(str(v.value) for v in rest if isinstance(v, ast.Constant))
    return None


class EnvReads:
    """What the given modules read from the environment, following their own reader functions."""

    def __init__(self, sources: list[str]) -> None:
        self.trees = [ast.parse(source) for source in sources]
        self.params: dict[str, list[str]] = {}
        self.bodies: dict[str, list[ast.FunctionDef]] = {}
        for tree in self.trees:
            for node in ast.walk(tree):
                if isinstance(node, ast.FunctionDef):
                    self.params[node.name] = [a.arg for a in node.args.posonlyargs + node.args.args]
                    self.params[node.name] += [a.arg for a in node.args.kwonlyargs]
                    self.bodies.setdefault(node.name, []).append(node)
        self.readers: dict[str, Reads] = {}
        while self._learn_readers():
            pass

    def _name_args(self, node: ast.AST) -> Iterator[tuple[ast.expr, str]]:
        """Each argument of ``node`` that names a variable read, with the suffix the read adds."""
        direct = _environ_name_arg(node)
        if direct is not None:
            yield direct, ""
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
            return
        params = self.params.get(node.func.id, [])
        for param, suffix in self.readers.get(node.func.id, set()):
            index = params.index(param)
            keyword = next((k.value for k in node.keywords if k.arg == param), None)
            arg = node.args[index] if index < len(node.args) else keyword
            if arg is not None:
                yield arg, suffix

    def _learn_readers(self) -> bool:
        learned = False
        for name, defs in self.bodies.items():
            reads = self.readers.setdefault(name, set())
            for node in (n for d in defs for n in ast.walk(d)):
                for arg, suffix in self._name_args(node):
                    template = _template(arg)
                    param = template[0] if template else None
                    if template is None or param is None or param not in self.params[name]:
                        continue
                    read = (param, template[1] + suffix)
                    learned |= read not in reads
                    reads.add(read)
        return learned

    def names(self) -> set[str]:
        """Every literal name handed to a reader or to ``os.environ`` anywhere in the modules."""
        found: set[str] = set()
        for tree in self.trees:
            for node in ast.walk(tree):
                for arg, suffix in self._name_args(node):
                    template = _template(arg)
                    if template and template[0] is None:
                        found.add(template[1] + suffix)
        return found


def _module_path(dotted: str) -> Path | None:
    base = REPO.joinpath(*dotted.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def _settings_and_its_helpers() -> list[Path]:
    """rewind/settings.py and every project module it imports, and those modules' imports, with their packages."""
    seen: list[Path] = []
    todo = [SETTINGS]
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.append(path)
        for node in ast.walk(ast.parse(path.read_text())):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
            names += [a.name for a in node.names] if isinstance(node, ast.Import) else []
            for name in (n for n in names if n.split(".")[0] in PRODUCT_PACKAGES):
                parts = name.split(".")
                todo += [p for i in range(1, len(parts) + 1) if (p := _module_path(".".join(parts[:i])))]
    return seen


def _product_modules() -> list[Path]:
    return [p for package in PRODUCT_PACKAGES for p in (REPO / package).rglob("*.py") if "migrations" not in p.parts]


@functools.cache  # parsing every module of the product takes a second: once per run
def _names_read() -> frozenset[str]:
    """What settings.py reads through its helpers, and what any product module reads from os.environ itself."""
    through_settings = EnvReads([p.read_text() for p in _settings_and_its_helpers()]).names()
    direct = {name for p in _product_modules() for name in EnvReads([p.read_text()]).names()}
    return frozenset(through_settings | direct)


def _names_documented() -> set[str]:
    names: set[str] = set()
    for line in CONFIGURATION_PAGE.read_text().splitlines():
        cells = line.split("|")
        if line.startswith("|") and len(cells) > 2:
            names.update(re.findall(r"`([A-Z][A-Z0-9_]*)`", cells[1]))
    return names


def test_the_reader_analysis_follows_helpers_f_strings_and_keywords() -> None:
    helpers = (
        "import os\n"
        "def _raw(name):\n    return os.environ.get(name)\n"
        "def env_int(name, default):\n    return _raw(name) or default\n"
        "def env_secret(name):\n    return _raw(name) or _raw(f'{name}_FILE')\n"
        "def kept(label, *, name):\n    return env_secret(name)\n"
        "def labelled(name, url):\n    return f'{name}: {url}'\n"
    )
    settings = (
        "A = env_int('A_S', 3)\nB = kept('x', name='B_KEY')\nC = labelled('NOT_READ', 'u')\n"
        "D = os.environ['D_DIRECT']\nE = os.getenv('E_DIRECT')\nF = dict(f=env_int('F_NESTED', 1))\n"
    )
    found = EnvReads([helpers, settings]).names()
    assert found == {"A_S", "B_KEY", "B_KEY_FILE", "D_DIRECT", "E_DIRECT", "F_NESTED"}


def test_the_settings_helpers_are_followed_into_their_modules() -> None:
    # Through rewind/notifications/config.py and rewind.lib.env.env_secret: the _FILE form of a secret.
    paths = {p.relative_to(REPO).as_posix() for p in _settings_and_its_helpers()}
    assert {"rewind/lib/env.py", "rewind/notifications/config.py", "rewind/oauth/config.py"} <= paths
    assert {"REWIND_NOTIFY_URLS_FILE", "DJANGO_SECRET_KEY_FILE", "REWIND_OAUTH_CIMD_TIMEOUT_S"} <= _names_read()


def test_every_variable_read_is_documented() -> None:
    missing = sorted(_names_read() - _names_documented() - IGNORED)
    assert missing == [], f"read but not in a table of {CONFIGURATION_PAGE.relative_to(REPO)}: {missing}"


def test_every_documented_variable_is_read() -> None:
    stale = sorted(_names_documented() - _names_read())
    assert stale == [], f"documented in {CONFIGURATION_PAGE.relative_to(REPO)} but read nowhere: {stale}"


def test_the_readmes_links_to_files_resolve() -> None:
    # MkDocs checks the links between pages; the README is outside the site, so its links are checked here.
    readme = REPO / "README.md"
    targets = re.findall(r"\]\(([^)\s]+)\)", readme.read_text())
    local = [t.split("#")[0] for t in targets if not re.match(r"[a-z]+:|#", t)]
    assert local, "the README links to no page of docs/"
    broken = [t for t in local if not (REPO / t).exists()]
    assert broken == []
