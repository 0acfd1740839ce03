"""Where an upstream's settings would hold a credential in plain text: its URL and its command.

An upstream's URL and command are stored as given, shown in the admin's list, and recorded in
the ``gateway.upstream.*`` audit rows; its headers and environment are stored encrypted and only
their names are ever shown. So a credential in the URL (``https://user:pw@h/mcp``,
``?api_key=...``) or on the command line (``--token abc``, ``postgresql://u:pw@db/x``,
``--header "Authorization: Bearer ..."``) would reach the audit log, which can never forget it. Such settings are refused, with a sentence saying where
the credential goes instead; no sentence quotes a value.

A name counts as a credential's when it ends in one (``token``, ``secret``, ``password``,
``apikey``, ...) or is one of the short names servers use (``key``, ``sig``, ``auth``, after a
``-``, ``_`` or ``.``): ``api_key``, ``access-token``, ``--password`` do, ``--port``, ``monkey``,
``--auth-mode`` do not. A flag's value that is a file path (``--key /etc/tls/key.pem``) is a
path, not a secret, and passes.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from urllib.parse import parse_qsl, urlsplit

_CREDENTIAL_NAME = re.compile(
    r"(token|secret|password|passwd|passphrase|credentials?|cookie|apikey|(^|[-_.])(pass|key|sig|signature|auth))$",
    re.IGNORECASE,
)
_PATH = ("/", "./", "../", "~/")
# An HTTP header with a credential given as one argument, e.g. mcp-remote's --header "Authorization: Bearer ...".
_CREDENTIAL_HEADER = re.compile(r"^\s*(proxy-)?authorization\s*:|\bbearer\s+\S{8,}", re.IGNORECASE)
ENV_HINT = (
    "pass it in the upstream's environment (env) instead; a server that reads it only from its "
    'arguments can be started as ["sh", "-c", "exec the-server --token \\"$THE_TOKEN\\""]'
)


def credential_name(name: str) -> bool:
    """Whether a query parameter's or a flag's name names a credential (see the module)."""
    return _CREDENTIAL_NAME.search(name.strip().lstrip("-")) is not None


def url_credential_problem(url: str) -> str | None:
    """Why ``url`` may not be stored (a user name, password, credential query or fragment), or None."""
    parts = urlsplit(url)
    if "@" in parts.netloc:
        return "put credentials in the upstream's headers, not in its URL (it holds a user name or password)"
    names = sorted({name for name, _ in parse_qsl(parts.query, keep_blank_values=True) if credential_name(name)})
    if names:
        return f"put credentials in the upstream's headers, not in its URL (its query names {', '.join(names)})"
    if parts.fragment or url.endswith("#"):
        return "give the upstream's URL without a fragment (#): it is never sent to the server"
    return None


def command_credential_problem(command: Sequence[str]) -> str | None:
    """Why ``command`` may not be stored (a credential among its arguments), or None; names the argument's position."""
    for position, part in enumerate(command):
        following = command[position + 1] if position + 1 < len(command) else None
        problem = _argument_problem(part, following)
        if problem is not None:
            return f"argument {position + 1} of the command {problem}: {ENV_HINT}"
    return None


def _argument_problem(part: str, following: str | None) -> str | None:
    if "://" in part and "@" in urlsplit(part).netloc:
        return "is a URL with a user name or password in it"
    if _CREDENTIAL_HEADER.search(part.partition("=")[2] or part):
        return "is an Authorization header or a bearer token"
    name, equals, value = part.partition("=")
    if equals and credential_name(name) and value and not value.startswith(_PATH):
        return f"sets {name.lstrip('-')}, a credential"
    if (
        not equals
        and part.startswith("-")
        and credential_name(part)
        and following is not None
        and not following.startswith(("-", *_PATH))
    ):
        return f"is {part}, followed by a credential"
    return None
