"""What a VM query may be: checked before any ZVM is asked.

A query names one VM by its name, a host name or FQDN, an IP address or its vmIdentifier.
Some values can never be one of those, and sending them to every ZVM as a ``vmName=`` filter
only to answer "no protected VM matches" would hide the caller's mistake:
- control, format and separator characters (NUL, line breaks, bidirectional overrides such as
  U+202E, zero-width characters) and lone surrogates: no ZVM shows a VM name holding them, and
  an override makes a name read differently from what it is;
- a ``..`` path segment (``../../etc``): a path, not a name;
- a list (``web01,web02`` or ``web01;web02``): one guard, look-up or recovery is about one VM;
  guard each. A VM whose name really holds a comma is named by its vmIdentifier instead.
"""

from __future__ import annotations

import re
import unicodedata

from rewind.errors import ApplicationError

MAX_QUERY_LENGTH = 255
_NEVER_IN_A_NAME = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})
_TRAVERSAL = re.compile(r"(^|[/\\])\.\.([/\\]|$)")
_LIST = re.compile(r"[,;]")


class VmQueryError(ApplicationError):
    pass


def _odd_character(text: str) -> str | None:
    for ch in text:
        if unicodedata.category(ch) in _NEVER_IN_A_NAME:
            return f"U+{ord(ch):04X}"
    return None


def check_vm_query(vm: str) -> str:
    """``vm`` stripped of surrounding white space; raises ``VmQueryError`` saying why it can name no VM."""
    query = vm.strip()
    if not query:
        raise VmQueryError("give a VM name, hostname or vmIdentifier")
    if len(query) > MAX_QUERY_LENGTH:
        raise VmQueryError(f"that VM name is too long ({len(query)} characters; at most {MAX_QUERY_LENGTH})")
    odd = _odd_character(query)
    if odd is not None:
        raise VmQueryError(
            f"a VM name holds no control, format or separator characters (found {odd}); nothing was asked"
        )
    if _TRAVERSAL.search(query):
        raise VmQueryError("a VM name is not a path ('..' found); nothing was asked")
    if _LIST.search(query):
        raise VmQueryError(
            "name one VM, not a list (',' or ';' found): guard or recover each VM separately; a VM whose name "
            "holds a comma is named by its vmIdentifier"
        )
    return query
